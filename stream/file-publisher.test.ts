/** The collector's file bus: batches appended as JSON lines (the raw text when it came with them), across restarts. */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { FileTransport } from './file.js';
import { FilePublisher } from './file-publisher.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-file-bus-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('file bus', () => {
  it('appends every batch as JSON lines that the file source reads back, and keeps what a restart finds', async () => {
    const path = join(dir, 'bus.jsonl');
    const a = await FilePublisher.open(path);
    await a.publish([
      { key: 'j1', events: [{ v: 1, kind: 'job_event', ts: 1, job: 'j1', event: 'start' }] },
      { key: 'h1', events: [{ n: 2 }, { n: 3 }], lines: ['{"n":2}', '{"n": 3}'] },
    ]);
    await a.stop();
    await a.stop();
    await expect(a.publish([{ key: 'x', events: [{}] }])).rejects.toMatchObject({
      code: 'RANKWATCH_ERR_STOPPED',
    });
    const b = await FilePublisher.open(path);
    await b.publish([{ key: 'j1', events: [{ n: 4 }] }]);
    await b.stop();
    expect(readFileSync(path, 'utf8')).toBe(
      '{"v":1,"kind":"job_event","ts":1,"job":"j1","event":"start"}\n{"n":2}\n{"n": 3}\n{"n":4}\n',
    );
    expect(b.counters()).toEqual({ file_events: 1 });
    const read: unknown[] = [];
    const t = new FileTransport({ path });
    await t.consume(async (d) => {
      read.push(...d.events);
    });
    await t.drain();
    expect(read).toHaveLength(4);
  });

  it('says at once when the path cannot be written', async () => {
    const err = await FilePublisher.open(join(dir, 'missing', 'bus.jsonl')).catch((e) => e);
    expect(err).toBeInstanceOf(RankwatchError);
    expect(err.code).toBe('RANKWATCH_ERR_PATH');
    expect(err.message).toMatch(/cannot be written \(ENOENT\)/);
  });
});
