/**
 * Prometheus text for GET /metrics (prom-client). A process registers families whose values are
 * read from its components' counters at scrape time, so nothing is counted twice; every registry
 * also gets a `rankwatch_health_check_ok` gauge per health check (1 ok, 0 failing).
 */
import { Counter, Gauge, Registry } from 'prom-client';
import type { Health } from './health.js';

export type Figures = () => Record<string, number | undefined>;

/** Values of one labeled family at scrape time: each with its labels. */
export type Series = () => { labels: Record<string, string>; value: number }[];

export class Metrics {
  readonly registry = new Registry();

  /** Counters `prefix_key_total` for each listed key of `read()`. */
  counters(prefix: string, keys: Record<string, string>, read: Figures): this {
    for (const [key, help] of Object.entries(keys)) {
      new Counter({
        name: `${prefix}_${key}_total`,
        help,
        registers: [this.registry],
        collect() {
          this.reset();
          const v = read()[key];
          if (v !== undefined && v > 0) this.inc(v);
        },
      });
    }
    return this;
  }

  /** Gauges `prefix_key` for each listed key of `read()`. */
  gauges(prefix: string, keys: Record<string, string>, read: Figures): this {
    for (const [key, help] of Object.entries(keys)) {
      new Gauge({
        name: `${prefix}_${key}`,
        help,
        registers: [this.registry],
        collect() {
          this.set(read()[key] ?? 0);
        },
      });
    }
    return this;
  }

  /** One labeled family (`counter` gets the `_total` suffix), read at scrape time. */
  labeled(kind: 'counter' | 'gauge', name: string, help: string, labelNames: string[], read: Series): this {
    const collect = function (this: Counter<string> | Gauge<string>) {
      this.reset();
      for (const { labels, value } of read())
        if (this instanceof Counter) {
          if (value > 0) this.inc(labels, value);
        } else this.set(labels, value);
    };
    if (kind === 'counter')
      new Counter({ name: `${name}_total`, help, labelNames, registers: [this.registry], collect });
    else new Gauge({ name, help, labelNames, registers: [this.registry], collect });
    return this;
  }

  health(h: Health): this {
    new Gauge({
      name: 'rankwatch_health_check_ok',
      help: 'health checks: 1 ok, 0 failing (reason on /healthz)',
      labelNames: ['check'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [name, c] of Object.entries(h.report().checks)) this.set({ check: name }, c.ok ? 1 : 0);
      },
    });
    new Counter({
      name: 'rankwatch_health_failures_total',
      help: 'failures that started and ended, per health check',
      labelNames: ['check'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [name, n] of Object.entries(h.outageCounts())) this.inc({ check: name }, n);
      },
    });
    return this;
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
