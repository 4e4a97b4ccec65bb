/**
 * Issue 26's acceptance for hangs, through the built CLI: one rank of a simulated 64-rank job
 * stops entering collectives (right before its data-parallel all-reduce, or at the top of a step)
 * and stays hung past the NCCL watchdog's timeout. The hang is named by its rank and host
 * - on the native path (`rankwatch sim` → `rankwatch replay`) and
 * - on the Inspector path (`sim --inspector-dir`: its collectives only in NCCL Inspector dump
 *   files, the hooks' step events posted to `rankwatch collect --nccl-inspector`, whose file bus
 *   `rankwatch replay` reads), both within 60 s of the stall in event time;
 * - and from the Flight Recorder analyzer's text report (`sim --flight-recorder-report`, dated by
 *   the dumps the watchdogs wrote) read by `rankwatch collect --flight-recorder FILE`, replayed with
 *   the hooks' step events alone: no GPU sample, collective or watchdog line names anyone there;
 * - and from NCCL RAS, which names a process by its pid on its node: `collect` gives it the job and
 *   global rank the node's hooks named.
 */
import { execFile } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { InjectedFault } from '../sim/cluster.js';
import { BIN, postLines, type Running, until } from './helpers.js';
import { collectInspector, fileCollector } from './inspector-path.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-hang-paths-'));
const RAS_FIXTURES = join(import.meta.dirname, '..', 'collectors', 'parsers', 'fixtures', 'nccl-ras');
const running: Running[] = [];
afterAll(() => {
  for (const r of running) r.kill();
  rmSync(dir, { recursive: true, force: true });
});

const cli = (args: string[], cwd = dir) =>
  new Promise<{ status: number; stderr: string }>((resolve) =>
    execFile(process.execPath, [BIN, ...args], { cwd, maxBuffer: 256 << 20 }, (err, _out, stderr) =>
      resolve({ status: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stderr }),
    ),
  );

const lines = (path: string) => readFileSync(path, 'utf8').split('\n').filter(Boolean);
const jsonl = (path: string) => lines(path).map((l) => JSON.parse(l));

/** The job: 64 ranks (8 hosts; tp 8, pp 4, dp 2), rank 30 hangs in step 20 for 11 minutes. */
const job = (hang: string) => [
  'sim',
  '--ranks',
  '64',
  '--steps',
  '30',
  '--seed',
  '7',
  '--start',
  '2026-03-01T00:00:00Z',
  '--fault',
  `${hang}:rank=30,at=20,for=660`,
];

async function sim(name: string, extra: string[], hang = 'hang_allreduce') {
  const work = join(dir, name);
  mkdirSync(work);
  const r = await cli([...job(hang), ...extra, '--truth', 'truth.json', '-o', 'events.jsonl'], work);
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  const truth = (JSON.parse(readFileSync(join(work, 'truth.json'), 'utf8')) as InjectedFault[])[0];
  return { work, truth, events: join(work, 'events.jsonl') };
}

async function replay(work: string, input: string | string[], out = 'findings.jsonl') {
  const r = await cli(['replay', ...[input].flat(), '--findings', join(work, out)]);
  expect(r.status).toBe(0);
  return jsonl(join(work, out)).filter((f) => f.type.startsWith('nccl_'));
}

/** The one hang finding opened, on the culprit, within 60 s of its stall. */
function expectNamed(findings: Record<string, unknown>[], truth: InjectedFault, withinMs: number) {
  const opened = findings.filter((f) => f.state === 'open');
  expect(opened.map((f) => [f.type, f.rank, f.host, f.gpu])).toEqual([
    ['nccl_hang', truth.rank, truth.host, truth.gpu],
  ]);
  const ttd = (opened[0].ts as number) - truth.onsetTs!;
  expect(ttd).toBeGreaterThanOrEqual(0);
  expect(ttd).toBeLessThanOrEqual(withinMs);
  return opened[0];
}

describe('a hung rank, named by rank and host on every path', () => {
  for (const hang of ['hang_allreduce', 'hang'])
    it(`${hang}: native and Inspector paths, within 60 s of the stall in event time`, async () => {
      const [native, inspector] = await Promise.all([
        sim(`${hang}-native`, [], hang),
        sim(`${hang}-inspector`, ['--inspector-dir', 'dumps'], hang),
      ]);
      const nativeFound = expectNamed(await replay(native.work, native.events), native.truth, 60_000);

      const hook = lines(inspector.events);
      expect(hook.some((l) => l.includes('"kind":"collective"'))).toBe(false);
      const sent = await collectInspector(inspector.work, join(inspector.work, 'dumps'), hook, running);
      expect(sent.filter((e) => e.kind === 'collective').length).toBeGreaterThan(1000);
      const bus = join(inspector.work, 'bus.jsonl');
      const found = expectNamed(await replay(inspector.work, bus), inspector.truth, 60_000);
      expect(found.evidence).toMatchObject({ signals: expect.arrayContaining(['gpu_idle']) });
      // The same finding as the native path's, within a step of it.
      expect(Math.abs((found.ts as number) - (nativeFound.ts as number))).toBeLessThanOrEqual(1_500);
      // Offline, the hooks' file and the collector's collectives as two files, merged by event
      // time: the same finding as the bus, whose collectives came seconds after their steps.
      const collectives = join(inspector.work, 'collectives.jsonl');
      const only = sent.filter((e) => e.kind === 'collective').map((e) => JSON.stringify(e));
      writeFileSync(collectives, `${only.join('\n')}\n`);
      const merged = await replay(inspector.work, [inspector.events, collectives], 'merged.jsonl');
      expect(expectNamed(merged, inspector.truth, 60_000)).toMatchObject({
        id: found.id,
        ts: found.ts,
        onset_ts: found.onset_ts,
      });
    }, 300_000);

  it('from a Flight Recorder text report, with the step events alone', async () => {
    const { work, truth, events } = await sim('fr', ['--no-telemetry', '--flight-recorder-report', 'fr.txt']);
    const all = jsonl(events);
    // The analyzer reads the dumps the watchdogs wrote: the report file is as old as the first.
    const dumped = all.find((e) => e.kind === 'fault' && e.source === 'nccl_timeout').ts as number;
    const report = join(work, 'fr.txt');
    const text = readFileSync(report, 'utf8');
    expect(text).toContain(`missing ranks: {${truth.rank}}`);
    utimesSync(report, dumped / 1000, dumped / 1000);
    const blocks = [...text.matchAll(/^missing ranks: \{(.*)\}$/gm)].reduce(
      (n, m) => n + m[1].split(',').length,
      0,
    );

    const bus = join(work, 'fr-bus.jsonl');
    const c = fileCollector(bus, ['--job', 'sim-7', '--flight-recorder', report], running);
    await until(
      'the report sent',
      () => {
        try {
          return lines(bus).length >= blocks ? true : undefined;
        } catch {
          return undefined;
        }
      },
      60_000,
    );
    expect(await c.stop()).toBe(0);
    const fr = jsonl(bus);
    expect(fr).toHaveLength(blocks);
    expect(new Set(fr.map((e) => `${e.source}/${e.fr}/${e.ts}`))).toEqual(
      new Set([`flight_recorder/not_joined/${dumped}`]),
    );

    // The hooks' step events (and the job's start and restart) with the report, in time order.
    const steps = all.filter((e) => e.kind === 'step' || e.kind === 'job_event' || e.kind === 'job');
    const merged = [...steps, ...fr].sort((a, b) => a.ts - b.ts);
    // The steps alone leave the culprit's data-parallel group, on two hosts: no one is named.
    const alone = join(work, 'steps.jsonl');
    writeFileSync(alone, `${steps.map((e) => JSON.stringify(e)).join('\n')}\n`);
    expect((await replay(work, alone)).filter((f) => f.state === 'open')).toEqual([]);
    const input = join(work, 'steps-and-report.jsonl');
    writeFileSync(input, `${merged.map((e) => JSON.stringify(e)).join('\n')}\n`);
    const found = expectNamed(await replay(work, input), truth, Number.POSITIVE_INFINITY);
    // Found once the report is whole (the next event after it: here the job's interruption), when
    // the dumps came (the watchdogs fire them), dated from the culprit's last step before it stopped.
    expect((found.ts as number) - dumped).toBeGreaterThanOrEqual(0);
    expect((found.ts as number) - dumped).toBeLessThanOrEqual(60_000);
    expect(found.evidence).toMatchObject({ signals: expect.arrayContaining(['fr_not_joined']) });
    expect(truth.onsetTs! - (found.onset_ts as number)).toBeGreaterThanOrEqual(0);
    expect(truth.onsetTs! - (found.onset_ts as number)).toBeLessThan(2_000);
    expect(found.summary).toMatch(
      new RegExp(`rank ${truth.rank} \\(${truth.host} GPU ${truth.gpu}\\) stopped after step 19`),
    );
  }, 300_000);

  it('from NCCL RAS: the process it names by its pid on its node becomes the global rank the hooks named', async () => {
    const work = join(dir, 'ras');
    mkdirSync(work);
    // RAS 2.24's report of a stopped process: "Process 3487984 on node 172.16.64.213 managing GPU 5"
    // (collectors/parsers/fixtures/nccl-ras/, from NCCL's docs), written once the steps are in.
    const ras = join(work, 'ras.txt');
    const config = join(work, 'collect.json');
    writeFileSync(
      config,
      JSON.stringify({
        sources: [{ type: 'nccl_ras', path: ras, intervalMs: 1000, hosts: { '172.16.64.213': 'node-213' } }],
      }),
    );
    const bus = join(work, 'bus.jsonl');
    const c = fileCollector(bus, ['--config', config], running);
    const local = await until(
      'the health port',
      () => /health on (http:\/\/\S+)\/healthz/.exec(c.stderr())?.[1],
    );
    // The node's hooks: ranks 40-47 of job llm on node-213, one process per GPU.
    const t0 = Date.parse('2026-03-01T00:00:00Z');
    const steps = [0, 1, 2].flatMap((step) =>
      [0, 1, 2, 3, 4, 5, 6, 7].map((gpu) =>
        JSON.stringify({
          v: 1,
          kind: 'step',
          ts: t0 + 1000 * (step + 1),
          job: 'llm',
          rank: 40 + gpu,
          host: 'node-213',
          gpu,
          pid: 3487979 + gpu,
          step,
          step_ms: 1000,
          compute_ms: 700,
        }),
      ),
    );
    expect(new Set(await postLines(local, steps))).toEqual(new Set([200]));
    await until('the steps sent', () => (lines(bus).length >= steps.length ? true : undefined));
    copyFileSync(join(RAS_FIXTURES, 'docs-2.24-incomplete.txt'), ras);
    utimesSync(ras, (t0 + 5000) / 1000, (t0 + 5000) / 1000);
    const faults = await until('the RAS faults', () => {
      const f = jsonl(bus).filter((e) => e.source === 'nccl_ras');
      return f.length >= 2 ? f : undefined;
    });
    expect(await c.stop()).toBe(0);
    expect(faults.map((e) => [e.ras, e.host, e.gpu, e.pid, e.job, e.rank])).toEqual([
      ['unresponsive', 'node-213', 5, 3487984, 'llm', 45],
      // "The missing rank: 21" of a communicator: a communicator rank, no process: no global rank.
      ['missing', 'collector-test', undefined, undefined, undefined, undefined],
    ]);
    const found = expectNamed(
      await replay(work, bus),
      { rank: 45, host: 'node-213', gpu: 5, onsetTs: t0 } as InjectedFault,
      60_000,
    );
    expect(found).toMatchObject({ job: 'llm', evidence: { signals: ['ras_unresponsive'] } });
  }, 120_000);
});
