/**
 * Findings → a generic webhook: a JSON body, signed with HMAC-SHA256 over "<timestamp>.<body>"
 * (headers `x-rankwatch-timestamp` and `x-rankwatch-signature: sha256=<hex>`, so a receiver can
 * check both origin and freshness), retried with jittered backoff; after `attempts` failures the
 * body goes to the dead-letter sink with the reason.
 */
import { createHmac } from 'node:crypto';
import { retry } from '../core/errors.js';
import type { Finding } from '../schema/finding.js';
import type { DeadLetter } from '../store/rows.js';
import { postJson } from './http.js';
import { BoundedQueue, type QueueCounters } from './queue.js';

export interface WebhookConfig {
  name: string;
  url: string;
  /** Shared secret for the signature; unsigned without one. */
  secret?: string;
  attempts: number;
  baseDelayMs: number;
  queueSize: number;
  timeoutMs: number;
}

export const WEBHOOK_DEFAULTS = { attempts: 5, baseDelayMs: 500, queueSize: 1_000, timeoutMs: 5_000 };

export function sign(secret: string, timestamp: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

export class WebhookSink {
  readonly name: string;
  private readonly cfg: WebhookConfig;
  private readonly queue: BoundedQueue<Finding>;
  private deadLettered = 0;

  constructor(
    cfg: Partial<WebhookConfig> & { url: string },
    private readonly onDeadLetter?: (d: DeadLetter) => void,
  ) {
    this.cfg = { name: 'webhook', ...WEBHOOK_DEFAULTS, ...cfg };
    this.name = this.cfg.name;
    this.queue = new BoundedQueue(this.cfg.queueSize, (f) => this.deliver(f));
  }

  start(): void {}

  async stop(): Promise<void> {
    await this.queue.idle();
  }

  send(f: Finding): void {
    this.queue.push(f);
  }

  flushed(): Promise<void> {
    return this.queue.idle();
  }

  stats(): QueueCounters & { dead_lettered: number } {
    return { ...this.queue.stats(), dead_lettered: this.deadLettered };
  }

  private async deliver(f: Finding): Promise<void> {
    const body = JSON.stringify({ version: 1, finding: f });
    const post = () => {
      const ts = String(Date.now());
      const headers: Record<string, string> = { 'x-rankwatch-timestamp': ts };
      if (this.cfg.secret) headers['x-rankwatch-signature'] = sign(this.cfg.secret, ts, body);
      return postJson(this.cfg.url, body, headers, this.cfg.timeoutMs);
    };
    let tries = 1;
    try {
      await retry(post, {
        attempts: this.cfg.attempts,
        baseDelayMs: this.cfg.baseDelayMs,
        jitter: true,
        onRetry: () => tries++,
      });
    } catch (err) {
      this.deadLettered++;
      this.onDeadLetter?.({
        ts: Date.now(),
        source: `webhook:${this.cfg.name}`,
        reason: `not delivered to ${this.cfg.url} after ${tries} attempt${tries === 1 ? '' : 's'}: ${(err as Error).message}`,
        raw: body,
      });
      throw err;
    }
  }
}
