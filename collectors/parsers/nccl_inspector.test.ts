import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InspectorJsonReader, type InspectorOp, type LineResult } from './nccl_inspector.js';
import { inspectorLine } from './nccl_inspector_format.js';
import { parseInspectorProm } from './nccl_inspector_prom.js';

const dir = join(import.meta.dirname, 'fixtures', 'nccl-inspector');
const text = (f: string) => readFileSync(join(dir, f), 'utf8');
const lines = (f: string) => text(f).split('\n').filter(Boolean);

/** Every line of a text through one reader, as a file is read. */
function read(t: string) {
  const r = new InspectorJsonReader();
  const out: LineResult[] = t.split('\n').map((l, i) => r.push(l, i + 1));
  const cut = r.finish();
  return {
    ops: out.flatMap((x) => (x.op ? [x.op] : [])),
    problems: [...out.flatMap((x) => (x.problem ? [x.problem] : [])), ...cut],
    ignored: out.flatMap((x) => (x.ignored ? [x.ignored] : [])),
    drops: out.flatMap((x) => (x.drops ? [x.drops] : [])),
  };
}

describe('NCCL Inspector JSON dumps', () => {
  it('reads the README records, plain and verbose (v4.0)', () => {
    const { ops, problems } = read(text('readme-v4.0.jsonl'));
    expect(problems).toEqual([]);
    expect(ops).toEqual<InspectorOp[]>([
      {
        host: 'example-hostname',
        pid: 1639453,
        comm: '0x7f8c496ae9f661',
        commRank: 2,
        nranks: 8,
        op: 'allreduce',
        seq: 1407,
        bytes: 17179869184,
        execUs: 61974,
        busbwGbs: 485.119099,
        tMs: 1748030377748.202,
      },
      {
        host: 'example-hostname',
        pid: 438776,
        comm: '0xe62dedaa97644a',
        commRank: 4,
        nranks: 8,
        op: 'reducescatter',
        seq: 1231,
        bytes: 2147483648,
        execUs: 41057,
        busbwGbs: 366.134533,
        // Verbose: when the kernel stopped, not when the dump thread wrote it 40 ms later.
        tMs: 1752867229275.811,
      },
    ]);
  });

  it('reads 2.28/2.29 output, and the writer reproduces it byte for byte', () => {
    const [line] = lines('exporter-readme-v4.0.jsonl');
    const { ops, problems } = read(line);
    expect(problems).toEqual([]);
    expect(ops[0]).toMatchObject({
      op: 'reducescatter',
      commRank: 31,
      nranks: 32,
      seq: 129,
      bytes: 65536,
      execUs: 110,
    });
    const rebuilt = inspectorLine({
      comm: '0x9e7a479f95a66c',
      commRank: 31,
      nranks: 32,
      nnodes: 4,
      hostname: 'example-hostname',
      pid: 468528,
      dumpUs: 1749490229087081,
      gitRev: '75e61acda-dirty',
      func: 'ReduceScatter',
      seq: 129,
      bytes: 65536,
      execUs: 110,
      algobwGbs: 19.065018,
      busbwGbs: 18.469236,
    });
    expect(rebuilt).toBe(line);
  });

  it('reads a re-serialised line (floats for integers, keys reordered)', () => {
    const { ops, problems } = read(text('datadog-agent-test-v4.0.jsonl'));
    expect(problems).toEqual([]);
    expect(ops[0]).toMatchObject({
      host: 'nanogpt-nccl-test-worker-0',
      pid: 48,
      commRank: 1,
      nranks: 3,
      seq: 8995,
      execUs: 5663,
      busbwGbs: 0.55585,
    });
  });

  it('reads v4.2 (comm_name, algorithm and protocol) and 2.30 p2p records; ops without a contract name are counted', () => {
    expect(read(text('comm-patterns-readme-v4.2.jsonl')).ops[0]).toMatchObject({
      commName: 'DP Group 0',
      op: 'allreduce',
      seq: 1407,
    });
    const { ops, ignored, problems } = read(text('writer-2.30-p2p.jsonl'));
    expect(problems).toEqual([]);
    expect(ops.map((o) => [o.op, o.comm, o.seq, o.peer, o.commName])).toEqual([
      ['allreduce', '0x9b4e2c6d11f0a7', 41, undefined, 'DP Group 0'],
      ['allreduce', '0x9b4e2c6d11f0a7', 42, undefined, 'DP Group 0'],
      ['send', '0x3c1f07d2a85e11', 17, 1, 'PP Group 3'],
      ['recv', '0x3c1f07d2a85e11', 18, 1, 'PP Group 3'],
    ]);
    expect(ignored).toEqual(['coll:Reduce']);
  });

  it("reports the plugin's own ring-buffer losses from v4.1+ dump_stats", () => {
    const { ops, drops, problems } = read(text('writer-v4.2-dump-stats.jsonl'));
    expect(problems).toEqual([]);
    expect(ops.map((o) => [o.op, o.seq])).toEqual([
      ['allgather', 900],
      ['allgather', 901],
    ]);
    expect(drops).toEqual([{ host: 'gpu-node-07', pid: 20872, comm: '0x51d0c3aa9e7b42', dropped: 12 }]);
  });

  it('gives v4.3 compact payloads the context of the dump_stats before them', () => {
    const { ops, problems } = read(text('reader-v4.3-compact.jsonl'));
    expect(problems).toEqual([]);
    expect(ops.map((o) => [o.host, o.pid, o.comm, o.commRank, o.op, o.seq, o.peer])).toEqual([
      ['gpu-node-07', 20873, '0x9b4e2c6d11f0a7', 5, 'allreduce', 43, undefined],
      ['gpu-node-07', 20873, '0x9b4e2c6d11f0a7', 5, 'allreduce', 44, undefined],
      ['gpu-node-07', 20873, '0x9b4e2c6d11f0a7', 5, 'send', 19, 6],
    ]);
  });

  it('reads CRLF files as the same records', () => {
    for (const f of ['readme-v4.0.jsonl', 'writer-2.30-p2p.jsonl', 'reader-v4.3-compact.jsonl']) {
      const crlf = read(text(f).replaceAll('\n', '\r\n'));
      expect(crlf.problems).toEqual([]);
      expect(crlf.ops).toEqual(read(text(f)).ops);
    }
  });

  it('counts cut records with their line numbers and keeps the whole ones', () => {
    const all = lines('writer-2.30-p2p.jsonl');
    const cut = [all[0], all[1].slice(0, 150), all[2], all[3].slice(0, 40)].join('\n');
    const { ops, problems } = read(cut);
    expect(ops.map((o) => o.seq)).toEqual([41, 17]);
    expect(problems.map((p) => p.line)).toEqual([2, 4]);
    expect(problems[0].reason).toMatch(/cut short|interleaved/);
  });

  it('counts lines two writers interleaved, and reads the whole records around them', () => {
    const a = lines('writer-2.30-p2p.jsonl');
    const b = lines('exporter-readme-v4.0.jsonl')[0];
    const mixed = [a[0], a[1].slice(0, 200) + b, a[1].slice(200), `${a[2]}${a[3]}`, a[4]].join('\n');
    const { ops, problems, ignored } = read(mixed);
    expect(ops.map((o) => o.seq)).toEqual([41]);
    expect(problems.map((p) => p.line)).toEqual([2, 3, 4]);
    expect(ignored).toEqual(['coll:Reduce']);
  });

  it('refuses v4.3 payloads whose context was cut, and says when a dump came short', () => {
    const all = lines('reader-v4.3-compact.jsonl');
    // The file opens mid-dump (its dump_stats was before the collector's first read).
    const orphan = read(all.slice(1).join('\n'));
    expect(orphan.ops).toEqual([]);
    expect(orphan.problems).toHaveLength(3);
    expect(orphan.problems[0].reason).toMatch(/no dump_stats counting it/);
    // A dump that lost its last record, followed by the next dump.
    const short = read([...all.slice(0, 3), all[0]].join('\n'));
    expect(short.ops).toHaveLength(2);
    expect(short.problems.map((p) => p.reason)).toEqual([
      expect.stringMatching(/before was cut short: 1 record/),
      expect.stringMatching(/dump cut short: 3 record/),
    ]);
  });

  it('refuses numbers that cannot be true, and drops a bandwidth the plugin could not measure', () => {
    const [line] = lines('exporter-readme-v4.0.jsonl');
    const bad = [
      line.replace('"coll_exec_time_us":110', '"coll_exec_time_us":-3'),
      line.replace('"rank":31', '"rank":32'),
      line.replace('"n_ranks":32', '"n_ranks":0'),
      line.replace('"pid":468528', '"pid":"x"'),
      line.replace('"coll_sn":129', '"coll_sn":1.5'),
    ];
    const { ops, problems } = read(bad.join('\n'));
    expect(ops).toEqual([]);
    expect(problems.map((p) => p.line)).toEqual([1, 2, 3, 4, 5]);
    const nan = read(line.replace('"coll_busbw_gbs":18.469236', '"coll_busbw_gbs":"nan"'));
    expect(nan.ops[0].busbwGbs).toBeUndefined();
    expect(nan.ops[0].execUs).toBe(110);
  });
});

describe('NCCL Inspector Prometheus textfiles', () => {
  it('reads the v5.1 aggregates of the README', () => {
    const snap = parseInspectorProm(text('readme-v5.1.prom'));
    expect(snap.problems).toEqual([]);
    expect(snap.ops).toEqual([]);
    expect(snap.buckets).toEqual([
      {
        host: 'nvl72004-T01',
        gpu: 0,
        commName: 'DP Group 0',
        nranks: 4,
        op: 'allreduce',
        sizeBucket: '4-5GB',
        bytesLow: 4 * 1024 ** 3,
        meanExecUs: 9498.47,
        busbwGbs: 678.263,
        algoProto: 'Ring_ll',
        version: 'v5.1',
      },
      {
        host: 'nvl72004-T01',
        gpu: 0,
        commName: 'DP Group 0',
        nranks: 4,
        op: 'send',
        sizeBucket: '512-513MB',
        bytesLow: 512 * 1024 ** 2,
        meanExecUs: 1154.87,
        busbwGbs: 464.9,
        version: 'v5.1',
      },
    ]);
  });

  it('reads the 2.29 per-operation samples as operations named by GPU', () => {
    const snap = parseInspectorProm(text('writer-2.29-perop.prom'));
    expect(snap.problems).toEqual([]);
    expect(snap.ops).toEqual<InspectorOp[]>([
      {
        host: 'gpu-node-07',
        gpu: 5,
        comm: '0x9b4e2c6d11f0a7',
        commRank: 5,
        nranks: 8,
        op: 'allreduce',
        seq: 41,
        bytes: 256 * 1024 ** 2,
        execUs: 2210,
        busbwGbs: 212.562,
        tMs: Date.UTC(2026, 3, 17, 8, 0, 0),
      },
      expect.objectContaining({ seq: 42, execUs: 2234, tMs: Date.UTC(2026, 3, 17, 8, 0, 1) }),
    ]);
  });

  it('reads CRLF snapshots alike and counts a snapshot cut mid-line', () => {
    const t = text('readme-v5.1.prom');
    expect(parseInspectorProm(t.replaceAll('\n', '\r\n')).buckets).toEqual(parseInspectorProm(t).buckets);
    const cut = parseInspectorProm(t.slice(0, t.indexOf('\n', t.indexOf('\n') + 1) + 60));
    expect(cut.problems).toHaveLength(1);
    // The send bucket lost its bandwidth line's value: only the whole AllReduce pair is read.
    expect(cut.buckets.map((b) => b.op)).toEqual(['allreduce']);
  });
});
