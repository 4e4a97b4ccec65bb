/**
 * The sinks a pipeline fans out to: a sink that fails holds its delivery (redelivered, not
 * stored twice, nothing skipped), and a recorded file read through the file transport sets bad
 * lines aside with their line numbers while the rest flows on.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { ChdbStore } from '../store/chdb.js';
import { tableCounts } from '../store/queries.js';
import type { DeadLetter } from '../store/rows.js';
import { FileTransport } from '../stream/file.js';
import { MemoryTransport } from '../stream/memory.js';
import { batchByKey } from '../stream/transport.js';
import { buildPipeline } from './build.js';
import type { DeadLetterSink, FindingSink } from './sinks.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-sinks-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const throttled = () =>
  new ClusterSim({
    ranks: 16,
    steps: 80,
    seed: 5,
    startTs: Date.now() - 600_000,
    faults: [parseFault('throttle:rank=3,at=20')],
  });

describe('finding sinks', () => {
  it('a sink that fails once holds its delivery: redelivered, stored once, every finding reaches it', async () => {
    const store = new ChdbStore({ path: join(dir, 'flaky') });
    const events = [...throttled().events()];
    const got: Finding[] = [];
    let failures = 0;
    const flaky: FindingSink = {
      name: 'flaky',
      write(fs) {
        if (failures === 0) {
          failures++;
          throw new Error('sink down for a moment');
        }
        got.push(...fs);
      },
    };
    const transport = new MemoryTransport({ retryDelayMs: 5 });
    const pipeline = buildPipeline({ transport, store, findingSinks: [flaky], idleAdvanceMs: 0 });
    await pipeline.start();
    for (let i = 0; i < events.length; i += 400)
      await transport.publish(batchByKey(events.slice(i, i + 400)));
    await pipeline.stop();
    try {
      expect(failures).toBe(1);
      expect(transport.counters().redelivered_batches).toBeGreaterThanOrEqual(1);
      expect((await tableCounts(store)).events).toBe(events.length);
      expect(pipeline.counters().events).toBe(events.length);
      const opened = got.filter((f) => f.state === 'open');
      expect(opened.map((f) => f.type)).toContain('throttle');
      // What the sink got is what the detectors produced, once each.
      expect(new Set(got.map((f) => `${f.id}/${f.state}/${f.ts}`)).size).toBe(got.length);
      expect(got.length).toBe(pipeline.counters().findings);
    } finally {
      await store.close();
    }
  });

  it('closes every sink when the pipeline stops', async () => {
    const closed: string[] = [];
    const sink = (name: string): FindingSink & DeadLetterSink => ({
      name,
      write: () => {},
      close: async () => void closed.push(name),
    });
    const pipeline = buildPipeline({
      transport: new MemoryTransport(),
      findingSinks: [sink('a'), sink('b')],
      deadLetterSinks: [sink('c')],
    });
    await pipeline.start();
    await pipeline.stop();
    expect(closed).toEqual(['a', 'b', 'c']);
    expect(pipeline.describe()).toMatch(/→ store: none · findings: a, b · dead letters: c$/);
  });
});

describe('a recorded file as the source', () => {
  const write = (name: string, text: string | Buffer) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };

  async function replay(path: string) {
    const letters: DeadLetter[] = [];
    const findings: Finding[] = [];
    const pipeline = buildPipeline({
      transport: new FileTransport({ path, linesPerDelivery: 500 }),
      findingSinks: [{ name: 'test', write: (fs) => void findings.push(...fs) }],
      deadLetterSinks: [{ name: 'test', write: (ls) => void letters.push(...ls) }],
    });
    await pipeline.start();
    await pipeline.stop();
    return { letters, findings, counters: pipeline.counters() };
  }

  it('sets bad lines aside with their line numbers (CRLF, blank lines, not JSON, not an event) and keeps the rest', async () => {
    const lines = [...throttled().events()].map((e) => JSON.stringify(e));
    lines.splice(100, 0, '{"v":1,"kind":"step","ts":5'); // cut off: line 101
    lines.splice(700, 0, ''); // blank: not an error
    lines.splice(1200, 0, '{"v":1,"kind":"warp_drive","ts":1}'); // line 1201
    const path = write('mixed.jsonl', `${lines.join('\r\n')}\r\n`);
    const r = await replay(path);
    expect(r.letters.map((l) => [l.line, l.reason.split(':')[0]])).toEqual([
      [101, 'not valid JSON'],
      [1201, expect.stringMatching(/kind|warp_drive/)],
    ]);
    expect(r.letters.every((l) => !l.raw.endsWith('\r'))).toBe(true);
    expect(r.counters.events).toBe(lines.length - 3);
    expect(r.findings.some((f) => f.type === 'throttle' && f.state === 'open')).toBe(true);
  });

  it('reads gzip by its magic bytes and ends the jobs at the end of the file, as the live run would', async () => {
    const events = [...throttled().events()].filter(
      (e) => !(e.kind === 'job_event' && e.event === 'finished'),
    );
    const path = write('job.bin', gzipSync(`${events.map((e) => JSON.stringify(e)).join('\n')}\n`));
    const r = await replay(path);
    expect(r.counters.events).toBe(events.length);
    const throttle = r.findings.filter((f) => f.type === 'throttle');
    expect(throttle.map((f) => f.state)).toContain('open');
    // The job never said finished: the straggler the throttle caused (job-scoped) resolves as the
    // quiet job ends; the throttle (the GPU's) stays open.
    const straggler = r.findings.filter((f) => f.type === 'straggler');
    expect(straggler.at(-1)).toMatchObject({ state: 'resolved', evidence: { resolved_reason: 'job_quiet' } });
    expect(throttle.at(-1)?.state).not.toBe('resolved');
  });

  it('a missing file is a clear input error before anything is read', async () => {
    await expect(replay(join(dir, 'nope.jsonl'))).rejects.toThrow(/no such file or directory.*nope\.jsonl/);
  });
});
