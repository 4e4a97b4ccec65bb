/**
 * Where a pipeline's output goes besides its store. Every finding event (open, update, resolved)
 * is fanned out to each finding sink in order, and every dead letter to each dead-letter sink,
 * before the delivery that produced them is acknowledged: a sink that rejects holds the delivery
 * for redelivery (at least once), without storing it twice. The store itself is not a sink here:
 * events, findings and dead letters go into it in one write, so what it holds always agrees.
 */
import type { Automation } from '../actions/automation.js';
import type { Alerting } from '../alerts/alerting.js';
import { costText } from '../core/figures.js';
import type { Finding } from '../schema/finding.js';
import type { DeadLetter } from '../store/rows.js';
import type { Delivery } from '../stream/transport.js';

export interface FindingSink {
  /** Named in the pipeline's topology line. */
  readonly name: string;
  /** Takes one delivery's finding events in order; resolves once they are where they go. */
  write(findings: Finding[]): void | Promise<void>;
  /** Flushes and releases; called once, when the pipeline stops. */
  close?(): Promise<void>;
}

export interface DeadLetterSink {
  readonly name: string;
  /** Takes one delivery's dead letters (with the delivery they came from). */
  write(letters: DeadLetter[], from: Delivery | undefined): void | Promise<void>;
  close?(): Promise<void>;
}

/** Something that takes JSON lines: cli/jsonl.ts LineWriter. */
export interface LineSink {
  write(line: string): Promise<void>;
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** Each finding event as one JSON line (`--findings FILE`, or stdout). Flushed per delivery. */
export function findingFileSink(name: string, out: LineSink): FindingSink {
  return {
    name,
    async write(findings) {
      for (const f of findings) await out.write(JSON.stringify(f));
      await out.flush();
    },
    close: () => out.close(),
  };
}

/**
 * How a finding reads on a terminal: `FOUND` when it opens, `UPDATED` when its cost reads
 * differently from the last line, `RESOLVED` (with why) when it ends. Every line names the place
 * and the cost as every other screen shows it (core/figures.ts), so an incident's last line says
 * what the summary, `report`, the API and the page say.
 */
export function consoleSink(
  print: (line: string) => void,
  when: (f: Finding) => string = (f) => new Date(f.ts).toISOString(),
  withJob = true,
): FindingSink {
  /** The cost last printed for each open incident. */
  const said = new Map<string, string>();
  return {
    name: 'console',
    write(findings) {
      for (const f of findings) {
        const cost = costText(f.est_cost_pct, '');
        if (f.state === 'update' && said.get(f.id) === cost) continue;
        if (f.state === 'resolved') said.delete(f.id);
        else said.set(f.id, cost);
        const verb = { open: 'FOUND   ', update: 'UPDATED ', resolved: 'RESOLVED' }[f.state];
        const where = `${f.host}${f.gpu !== undefined ? `/${f.gpu}` : ''}${f.rank !== undefined ? ` rank ${f.rank}` : ''}${f.peer_host ? ` ↔ ${f.peer_host}` : ''}`;
        const head = `[${when(f)}] ${verb} ${f.type}${withJob && f.job ? ` ${f.job}` : ''}${where ? ` ${where}` : ''}`;
        const text = f.state === 'resolved' ? (f.resolution ?? f.summary) : f.summary;
        print(`${head}${cost ? ` · cost ${cost}` : ''}: ${text}`);
      }
    },
  };
}

/** Alert routes (Alertmanager, webhooks): queue and return at once; stopped with the pipeline. */
export function alertSink(alerting: Alerting): FindingSink {
  return { name: 'alerts', write: (fs) => alerting.onFindings(fs), close: () => alerting.stop() };
}

/** The repair loop (node health, governor, cordon driver); its work finishes before close resolves. */
export function actionSink(automation: Automation): FindingSink {
  return { name: 'actions', write: (fs) => automation.onFindings(fs), close: () => automation.idle() };
}

/** Any callback, e.g. a test or a summary collecting what was found. */
export function callbackSink(name: string, fn: (findings: Finding[]) => void): FindingSink {
  return { name, write: fn };
}

/**
 * Dead letters as JSON lines in input order, `{line, reason, raw}` (replay's `--dead-letter`): the
 * line number is where the event sat in the file read.
 */
export function deadLetterFileSink(name: string, out: LineSink): DeadLetterSink {
  return {
    name,
    async write(letters) {
      const sorted = [...letters].sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
      for (const d of sorted) await out.write(JSON.stringify({ line: d.line, reason: d.reason, raw: d.raw }));
    },
    close: () => out.close(),
  };
}

/** A bus's own dead-letter topic (Kafka), keyed to the delivery the letters came from. */
export function busDeadLetterSink(bus: {
  readonly type: string;
  deadLetter(rows: DeadLetter[], origin?: { partition: number; offset: number }): Promise<void>;
}): DeadLetterSink {
  return {
    name: `${bus.type} dead-letter topic`,
    write: (letters, from) =>
      bus.deadLetter(letters, from ? { partition: from.partition, offset: from.offset } : undefined),
  };
}
