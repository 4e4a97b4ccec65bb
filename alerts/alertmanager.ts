/**
 * Findings → Prometheus Alertmanager through its v2 API (POST /api/v2/alerts). One alert per set
 * of dedup labels (alertname, job, host, gpu, type, severity); it stays firing while any finding
 * with those labels is open, is re-sent every `resendMs` (below Alertmanager's resolve_timeout,
 * 5 min by default, so an open alert never times out) and gets `endsAt` when the last resolves.
 */

import { retry } from '../core/errors.js';
import { costText } from '../core/figures.js';
import type { Finding } from '../schema/finding.js';
import { postJson } from './http.js';
import { BoundedQueue, type QueueCounters } from './queue.js';

export interface AlertmanagerConfig {
  /** Alertmanager's base URL, e.g. http://alertmanager:9093. */
  url: string;
  /** Re-send open alerts this often; keep it below resolve_timeout. */
  resendMs: number;
  /** Base of the link to a finding (`<linkBase>/v1/findings/<id>`); none when unset. */
  linkBase?: string;
  queueSize: number;
  timeoutMs: number;
  attempts: number;
}

export const ALERTMANAGER_DEFAULTS: Omit<AlertmanagerConfig, 'url'> = {
  resendMs: 60_000,
  queueSize: 1_000,
  timeoutMs: 5_000,
  attempts: 4,
};

export interface PostableAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  startsAt: string;
  endsAt?: string;
  generatorURL?: string;
}

interface Group {
  alert: PostableAlert;
  members: Set<string>;
}

export class AlertmanagerSink {
  readonly name = 'alertmanager';
  private readonly cfg: AlertmanagerConfig;
  private readonly groups = new Map<string, Group>();
  private readonly groupOf = new Map<string, string>();
  private readonly queue: BoundedQueue<PostableAlert[]>;
  private timer: NodeJS.Timeout | undefined;
  private readonly endpoint: string;

  constructor(cfg: Partial<AlertmanagerConfig> & { url: string }) {
    this.cfg = { ...ALERTMANAGER_DEFAULTS, ...cfg };
    this.endpoint = `${this.cfg.url.replace(/\/+$/, '')}/api/v2/alerts`;
    this.queue = new BoundedQueue(this.cfg.queueSize, (alerts) =>
      retry(() => postJson(this.endpoint, JSON.stringify(alerts), {}, this.cfg.timeoutMs), {
        attempts: this.cfg.attempts,
        baseDelayMs: 500,
        maxDelayMs: 10_000,
        jitter: true,
      }),
    );
  }

  start(): void {
    this.timer ??= setInterval(() => this.resend(), this.cfg.resendMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.queue.idle();
  }

  stats(): QueueCounters & { open_alerts: number } {
    return { ...this.queue.stats(), open_alerts: this.groups.size };
  }

  /** Takes one finding event; never waits. */
  send(f: Finding): void {
    const alert = toAlert(f, this.cfg.linkBase);
    const key = JSON.stringify(alert.labels);
    const was = this.groupOf.get(f.id);
    // The labels moved (e.g. severity rose): the finding leaves its old alert.
    if (was !== undefined && (was !== key || f.state === 'resolved')) this.leave(f.id, was, f.ts);
    if (f.state === 'resolved') return;
    let g = this.groups.get(key);
    if (!g) {
      g = { alert, members: new Set() };
      this.groups.set(key, g);
    } else {
      g.alert = { ...alert, startsAt: g.alert.startsAt };
    }
    g.members.add(f.id);
    this.groupOf.set(f.id, key);
    this.queue.push([g.alert]);
  }

  /** Every open alert again, so Alertmanager does not resolve it by timeout. */
  resend(): void {
    if (this.groups.size) this.queue.push([...this.groups.values()].map((g) => g.alert));
  }

  /** Resolves when everything queued so far has been sent (or given up). */
  flushed(): Promise<void> {
    return this.queue.idle();
  }

  private leave(id: string, key: string, ts: number): void {
    this.groupOf.delete(id);
    const g = this.groups.get(key);
    if (!g) return;
    g.members.delete(id);
    if (g.members.size) return;
    this.groups.delete(key);
    const start = Date.parse(g.alert.startsAt);
    this.queue.push([{ ...g.alert, endsAt: new Date(Math.max(ts, start + 1)).toISOString() }]);
  }
}

export function toAlert(f: Finding, linkBase?: string): PostableAlert {
  const labels: Record<string, string> = {
    alertname: `rankwatch_${f.type}`,
    type: f.type,
    severity: f.severity,
    host: f.host,
  };
  // Alertmanager drops empty labels; leave absent ones out rather than send "".
  if (f.job) labels.job = f.job;
  if (f.gpu !== undefined) labels.gpu = String(f.gpu);
  const annotations: Record<string, string> = { summary: f.summary, finding_id: f.id, action: f.action };
  if (f.est_cost_pct !== undefined) annotations.cost = `${costText(f.est_cost_pct)} of the job's throughput`;
  const link = linkBase
    ? `${linkBase.replace(/\/+$/, '')}/v1/findings/${encodeURIComponent(f.id)}`
    : undefined;
  if (link) annotations.link = link;
  return {
    labels,
    annotations,
    startsAt: new Date(f.onset_ts ?? f.ts).toISOString(),
    ...(link ? { generatorURL: link } : {}),
  };
}
