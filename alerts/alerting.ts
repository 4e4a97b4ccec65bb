/**
 * The findings consumer that feeds alert sinks: routes each finding event by type and severity
 * to the sinks named in the matching route (first match wins). Never waits: each sink queues.
 */
import type { Finding, Severity } from '../schema/finding.js';
import type { DeadLetter } from '../store/rows.js';
import { type AlertmanagerConfig, AlertmanagerSink } from './alertmanager.js';
import { type WebhookConfig, WebhookSink } from './webhook.js';

export interface AlertRoute {
  /** Finding types this route takes (all when absent). */
  types?: string[];
  /** Severities this route takes (all when absent). */
  severities?: Severity[];
  /** Sink names (`alertmanager`, a webhook's name); empty drops the finding. */
  sinks: string[];
}

export interface AlertingConfig {
  alertmanager?: Partial<AlertmanagerConfig> & { url: string };
  webhooks?: (Partial<WebhookConfig> & { url: string; name: string })[];
  /** Default: warning and critical findings go to every sink; info stays in the store. */
  routes?: AlertRoute[];
}

export interface AlertSink {
  readonly name: string;
  start(): void;
  stop(): Promise<void>;
  send(f: Finding): void;
  flushed(): Promise<void>;
  stats(): object;
}

export class Alerting {
  readonly sinks: AlertSink[] = [];
  private readonly routes: AlertRoute[];
  private routed = 0;
  private unrouted = 0;

  constructor(cfg: AlertingConfig, onDeadLetter?: (d: DeadLetter) => void) {
    if (cfg.alertmanager) this.sinks.push(new AlertmanagerSink(cfg.alertmanager));
    for (const w of cfg.webhooks ?? []) this.sinks.push(new WebhookSink(w, onDeadLetter));
    this.routes = cfg.routes ?? [
      { severities: ['warning', 'critical'], sinks: this.sinks.map((s) => s.name) },
    ];
  }

  start(): void {
    for (const s of this.sinks) s.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.sinks.map((s) => s.stop()));
  }

  /** The pipeline's onFindings: returns at once. */
  onFindings = (fs: Finding[]): void => {
    for (const f of fs) {
      const route = this.routes.find(
        (r) => (!r.types || r.types.includes(f.type)) && (!r.severities || r.severities.includes(f.severity)),
      );
      // A resolve always follows its open, wherever that went: send it to every sink.
      const names = f.state === 'resolved' ? this.sinks.map((s) => s.name) : (route?.sinks ?? []);
      if (names.length === 0) this.unrouted++;
      else this.routed++;
      for (const s of this.sinks) if (names.includes(s.name)) s.send(f);
    }
  };

  flushed(): Promise<void> {
    return Promise.all(this.sinks.map((s) => s.flushed())).then(() => undefined);
  }

  stats(): Record<string, unknown> {
    return {
      routed: this.routed,
      unrouted: this.unrouted,
      ...Object.fromEntries(this.sinks.map((s) => [s.name, s.stats()])),
    };
  }
}
