/**
 * Hangs named by rank within a minute, on simulated jobs (sim/hang.ts): a rank that hangs at the
 * top of a step or right before its data-parallel all-reduce, its peers spinning in NCCL, their
 * watchdogs firing 600 s later; NCCL RAS and Flight Recorder reports fed as their sources write
 * them (docs: the shapes in schema/events.ts); and what must open nothing: pauses of the whole job.
 */
import { describe, expect, it } from 'vitest';
import { frFaultEvent } from '../../collectors/parsers/flight_recorder.js';
import { parseFrReport } from '../../collectors/parsers/fr_report.js';
import type { RankwatchEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { ClusterSim, type SimOptions } from '../../sim/cluster.js';
import { parseFault } from '../../sim/faults.js';
import { FlightRecorderReport } from '../../sim/flight-recorder.js';
import { scoreRun } from '../../sim/score.js';
import { DetectorRunner } from '../runner.js';

const HANG_TYPES = new Set(['nccl_hang', 'nccl_desync', 'nccl_rank_behind']);

/** A report to send once the hang began: `after` ms past the culprit's stop. */
interface Later {
  after: number;
  event: (ts: number) => RankwatchEvent;
}

/** Runs a job through the detectors, sending `later` reports at their time after the hang's onset. */
function run(sim: ClusterSim, later: Later[] = []): Finding[] {
  const runner = new DetectorRunner();
  const out: Finding[] = [];
  const due = [...later];
  for (const e of sim.events()) {
    const onset = sim.faults[0]?.onsetTs;
    while (onset !== undefined && due.length && onset + due[0].after <= e.ts) {
      const l = due.shift()!;
      runner.push(l.event(onset + l.after));
    }
    runner.push(e);
    if (runner.stats().events % 50_000 === 0) out.push(...runner.take().findings);
  }
  runner.flush();
  out.push(...runner.take().findings);
  return out;
}

const hangs = (f: Finding[]) => f.filter((x) => HANG_TYPES.has(x.type));

function sim(ranks: number, fault: string, o: Partial<SimOptions> = {}): ClusterSim {
  return new ClusterSim({ ranks, steps: 70, seed: 5, job: 'j', faults: [parseFault(fault)], ...o });
}

describe('a hung rank, named live', () => {
  for (const [family, fault] of [
    ['at the top of a step', 'hang:rank=301,at=40'],
    ['right before its data-parallel all-reduce', 'hang_allreduce:rank=301,at=40'],
  ] as const) {
    it(`512 ranks, ${family}: its rank, host and GPU within 60 s; the peers' timeouts are its evidence`, () => {
      const s = sim(512, fault);
      const f = run(s);
      const truth = s.faults[0];
      const opened = hangs(f).filter((x) => x.state === 'open');
      // One hang-type finding, on the culprit: none on the hosts that waited for it.
      expect(opened.map((x) => [x.type, x.host, x.gpu, x.rank])).toEqual([
        ['nccl_hang', truth.host, truth.gpu, 301],
      ]);
      expect(opened[0].ts - truth.onsetTs!).toBeLessThan(60_000);
      expect(opened[0].job).toBe('j');
      expect(opened[0].evidence.signals).toContain('gpu_idle');
      expect(opened[0].summary).toContain(`rank 301 (${truth.host} GPU ${truth.gpu})`);
      expect(scoreRun(f, s.faults).falseFindings).toEqual([]);
      // 600 s later every peer's watchdog fired; the culprit's did not.
      const told = f.filter((x) => x.id === opened[0].id && x.state !== 'open');
      const last = told.at(-1)!;
      expect(last.state).toBe('resolved');
      expect(last.evidence).toMatchObject({
        resolved_reason: 'job_restarted',
        timeouts: { timed_out: 511, culprit_timed_out: false, missing: [301] },
      });
      expect(last.evidence.signals).toContain('missing_from_timeouts');
    });
  }

  it('the stuck collective is the one the peers wait in: the data-parallel all-reduce the culprit never entered', () => {
    const s = sim(128, 'hang_allreduce:rank=45,at=30');
    const f = hangs(run(s));
    const open = f.find((x) => x.state === 'open')!;
    // rank 45: stage 1, tensor-parallel index 5; its data-parallel group's all-reduce of step 30.
    expect(open.evidence.stuck_in).toEqual([{ comm: 'dp.s1.t5', op: 'allreduce', next_seq: 31 }]);
    expect(open.summary).toContain('in allreduce on communicator dp.s1.t5 (seq 31)');
    const settled = f.find((x) => x.state === 'update' && x.evidence.timeouts)!;
    expect(settled.evidence.timeouts).toMatchObject({
      waited_in: { pg_name: 'dp.s1.t5', seq: 31, op: 'ALLREDUCE' },
    });
  });

  it('without GPU samples the live signs leave several suspects: the watchdog names the one absent from its timeouts', () => {
    const s = sim(128, 'hang_allreduce:rank=45,at=30', { telemetry: false });
    const f = hangs(run(s));
    const open = f.filter((x) => x.state === 'open');
    expect(open.map((x) => [x.type, x.rank, x.host, x.gpu])).toEqual([
      ['nccl_hang', 45, s.faults[0].host, 5],
    ]);
    // Opened when the timeouts settled, 600 s on, with the live signs that agree.
    expect(open[0].ts - s.faults[0].onsetTs!).toBeGreaterThan(600_000);
    expect(open[0].evidence.signals).toEqual(['missing_from_timeouts', 'seq_behind', 'stopped_first']);
  });

  it("a hung rank's GPU that drains queued work for a few seconds before it idles is still named", () => {
    const s = sim(64, 'hang:rank=21,at=30');
    const runner = new DetectorRunner();
    for (const e of s.events()) {
      const onset = s.faults[0].onsetTs;
      const draining = e.kind === 'gpu' && e.rank === 21 && onset !== undefined && e.ts < onset + 5_000;
      runner.push(draining ? { ...e, util_pct: 100, throttle_reasons: 0, power_w: 600 } : e);
    }
    runner.flush();
    const open = hangs(runner.take().findings).filter((x) => x.state === 'open');
    expect(open.map((x) => [x.rank, x.evidence.signals])).toEqual([[21, ['gpu_idle']]]);
  });

  it('a host that goes down (its GPU samples stop) while the job waits is named as a host', () => {
    const s = sim(64, 'hang:rank=21,at=30');
    const runner = new DetectorRunner();
    for (const e of s.events()) {
      const onset = s.faults[0].onsetTs;
      if (e.kind === 'gpu' && e.host === 'gpu-0002' && onset !== undefined && e.ts > onset) continue;
      runner.push(e);
    }
    runner.flush();
    const open = hangs(runner.take().findings).filter((x) => x.state === 'open');
    expect(open.map((x) => [x.host, x.rank, x.gpu, x.evidence.signals])).toEqual([
      ['gpu-0002', undefined, undefined, ['gpu_silent']],
    ]);
    expect(open[0].evidence.suspects).toEqual([16, 17, 18, 19, 20, 21, 22, 23]);
    expect(open[0].summary).toContain('gpu-0002 (ranks 16, 17, 18, 19, 20, 21, 22, 23) stopped');
  });

  it('a rank that stalls 45 s and comes back opens, then resolves when the job moves on', () => {
    const s = sim(64, 'hang:rank=21,at=30,for=45');
    const f = hangs(run(s));
    expect(f.map((x) => [x.type, x.state, x.rank])).toEqual([
      ['nccl_hang', 'open', 21],
      ['nccl_hang', 'resolved', 21],
    ]);
    expect(f[1].evidence).toMatchObject({ resolved_reason: 'resumed' });
    expect(f[1].ts - s.faults[0].onsetTs!).toBeLessThan(50_000);
  });
});

describe('a hang another process took over', () => {
  it('a job let go (a Kafka rebalance) drops its open hang without resolving it', () => {
    const s = sim(64, 'hang:rank=21,at=30');
    const runner = new DetectorRunner();
    const out: Finding[] = [];
    let forgot = 0;
    for (const e of s.events()) {
      runner.push(e);
      out.push(...hangs(runner.take().findings));
      if (out.length) {
        runner.forget('j');
        forgot = e.ts;
        break; // its events now go to the other process
      }
    }
    // Hours of other traffic later, nothing is resolved here: the other process carries it.
    runner.push({ v: 1, kind: 'job_event', ts: forgot + 2 * 3_600_000, job: 'other', event: 'start' });
    runner.push({ v: 1, kind: 'job_event', ts: forgot + 3 * 3_600_000, job: 'other', event: 'finished' });
    runner.flush();
    out.push(...hangs(runner.take().findings));
    expect(out.map((x) => x.state)).toEqual(['open']);
  });
});

describe('what is not a hang', () => {
  /** A clean job whose every GPU goes idle for `pauseMs` after step `at` (a checkpoint, a restart's wait), then runs on. */
  function pausedJob(ranks: number, at: number, pauseMs: number, resume: boolean): RankwatchEvent[] {
    const s = new ClusterSim({ ranks, steps: 60, seed: 2, job: 'p', checkpointEvery: 0 });
    const out: RankwatchEvent[] = [];
    let cut: number | undefined;
    for (const e of s.events()) {
      if (cut === undefined && e.kind === 'step' && e.step === at + 1) {
        cut = out.findLast((x) => x.kind === 'step')!.ts;
        for (let ts = cut + 1000; ts < cut + pauseMs; ts += 1000)
          for (const p of s.places)
            out.push({
              v: 1,
              kind: 'gpu',
              ts,
              host: p.host,
              gpu: p.gpu,
              job: 'p',
              rank: p.rank,
              sm_clock_mhz: 345,
              power_w: 70,
              util_pct: 0,
              throttle_reasons: 1,
            });
        if (!resume) break;
      }
      if (e.kind === 'job_event' && e.event === 'finished') continue;
      out.push(cut === undefined ? e : { ...e, ts: e.ts + pauseMs });
    }
    return out;
  }

  it('every GPU idle together for 3 minutes (a job-wide checkpoint), then steps again: nothing', () => {
    const runner = new DetectorRunner();
    for (const e of pausedJob(64, 30, 180_000, true)) runner.push(e);
    runner.flush();
    expect(hangs(runner.take().findings)).toEqual([]);
  });

  it('a job that stops for good, its GPUs idle for 20 minutes after (the end of a job): nothing', () => {
    const runner = new DetectorRunner();
    for (const e of pausedJob(64, 40, 1_200_000, false)) runner.push(e);
    runner.endOfInput();
    expect(hangs(runner.take().findings)).toEqual([]);
  });

  it('an elastic restart (a gap with no reports at all) and a clean job with stalls and checkpoints: nothing', () => {
    for (const o of [
      { restartAt: 30, renumber: true },
      { stallProb: 0.2, checkpointEvery: 20 },
    ]) {
      const s = new ClusterSim({ ranks: 64, steps: 60, seed: 3, job: 'c', ...o });
      const runner = new DetectorRunner();
      for (const e of s.events()) runner.push(e);
      runner.flush();
      expect(hangs(runner.take().findings)).toEqual([]);
    }
  });
});

describe('NCCL RAS and Flight Recorder reports', () => {
  // 128 ranks, no GPU samples: the live signs alone leave the culprit's data-parallel group.
  const quiet = () => sim(128, 'hang_allreduce:rank=45,at=30', { telemetry: false });
  const ras = (ts: number, ras: string, extra: Record<string, unknown> = {}) =>
    ({
      v: 1,
      kind: 'fault',
      ts,
      host: 'gpu-0005',
      gpu: 5,
      source: 'nccl_ras',
      ras,
      message: `rank ${ras}`,
      ...extra,
    }) as RankwatchEvent;

  it('RAS "dead" on the culprit (host and GPU only) opens at once, rank and job filled in', () => {
    const s = quiet();
    const f = hangs(run(s, [{ after: 5_000, event: (ts) => ras(ts, 'dead', { pid: 4242 }) }]));
    expect(f[0]).toMatchObject({
      type: 'nccl_hang',
      state: 'open',
      job: 'j',
      rank: 45,
      host: 'gpu-0005',
      gpu: 5,
    });
    expect(f[0].ts - s.faults[0].onsetTs!).toBe(5_000);
    expect(f[0].evidence.signals).toEqual(['ras_dead']);
    expect(f[0].summary).toContain('NCCL RAS: dead');
  });

  it('RAS "behind" twice with the same count, 10 s apart, names the rank; once in a running job, nothing', () => {
    const s = quiet();
    const behind = (ts: number) => ras(ts, 'behind', { comm: '0x7f3a', ops: 640, peers_ops: 641 });
    const f = hangs(
      run(
        s,
        [5_000, 15_000].map((after) => ({ after, event: behind })),
      ),
    );
    expect(f[0]).toMatchObject({ type: 'nccl_hang', state: 'open', rank: 45 });
    expect(f[0].ts - s.faults[0].onsetTs!).toBe(15_000);
    expect(f[0].summary).toContain('on communicator 0x7f3a');

    const healthy = new ClusterSim({ ranks: 128, steps: 40, seed: 5, job: 'j', telemetry: false });
    const runner = new DetectorRunner();
    let sent = false;
    for (const e of healthy.events()) {
      if (!sent && e.kind === 'step' && e.step === 20) {
        runner.push(behind(e.ts));
        sent = true;
      }
      runner.push(e);
    }
    runner.flush();
    expect(hangs(runner.take().findings)).toEqual([]);
  });

  it('RAS saying nothing is no proof (NVIDIA/nccl#1730): the sequence numbers stop and the idle GPU names it', () => {
    const s = sim(128, 'hang_allreduce:rank=45,at=30');
    const f = hangs(run(s));
    expect(f[0]).toMatchObject({ type: 'nccl_hang', state: 'open', rank: 45 });
    expect(f[0].evidence.signals).toEqual(['gpu_idle', 'seq_behind', 'stopped_first']);
    expect(f[0].ts - s.faults[0].onsetTs!).toBeLessThan(60_000);
  });

  const fr = (ts: number, kind: string, extra: Record<string, unknown> = {}) =>
    ({
      v: 1,
      kind: 'fault',
      ts,
      host: 'gpu-0003',
      source: 'flight_recorder',
      fr: kind,
      pg: '14',
      pg_name: 'dp.s1.t5',
      seq: 31,
      op: 'allreduce',
      op_raw: 'nccl:all_reduce',
      message: 'Culprit rank 45; Error type: ...',
      job: 'j',
      ...extra,
    }) as RankwatchEvent;

  /** A peer's GPU sample, spinning in NCCL: what tells the detector a report's blocks are all in. */
  const spinning = (ts: number) =>
    ({
      v: 1,
      kind: 'gpu',
      ts,
      host: 'gpu-0000',
      gpu: 0,
      job: 'j',
      rank: 0,
      sm_clock_mhz: 1980,
      power_w: 170,
      util_pct: 100,
    }) as RankwatchEvent;

  it('Flight Recorder "never joined" names the rank, host and GPU, and the collective of the process group', () => {
    const s = quiet();
    const f = hangs(
      run(s, [
        {
          after: 40_000,
          event: (ts) => fr(ts, 'not_joined', { missing_ranks: [45], expected_ranks: [37, 45, 53, 61] }),
        },
        // A report is judged whole: at the next event after its blocks (or the idle bus's clock).
        { after: 41_000, event: spinning },
      ]),
    );
    expect(f[0]).toMatchObject({
      type: 'nccl_hang',
      state: 'open',
      rank: 45,
      host: 'gpu-0005',
      gpu: 5,
      action: 'watch',
    });
    expect(f[0].ts - s.faults[0].onsetTs!).toBe(41_000);
    expect(f[0].summary).toContain('in allreduce of process group 14 (dp.s1.t5) (seq 31)');
  });

  for (const type of ['hang', 'hang_allreduce'])
    it(`${type}: a whole analyzer report, which also names the ranks stuck behind it, names the one that hung`, () => {
      // The report the dumps give when the watchdogs fire (sim/flight-recorder.ts), through the
      // collector's parser: the hung rank is missing from its groups, each rank stuck behind it
      // from its own data-parallel group (its tensor-parallel peers joined the culprit's group).
      const job = () => sim(128, `${type}:rank=45,at=30`, { telemetry: false });
      const first = job();
      const recorder = new FlightRecorderReport(first);
      let dumpTs = 0;
      for (const e of first.events()) {
        recorder.take(e);
        if (!dumpTs && e.kind === 'fault' && e.source === 'nccl_timeout') dumpTs = e.ts;
      }
      // The analyzer prints its groups in no set order: here the blocks of the ranks stuck behind first.
      const problems = parseFrReport(recorder.text()).problems.reverse();
      expect(new Set(problems.map((p) => p.rank)).size).toBeGreaterThan(4);
      const s = job();
      const after = dumpTs - first.faults[0].onsetTs!;
      const f = hangs(
        run(s, [
          ...problems.map((p) => ({
            after,
            event: (ts: number) => frFaultEvent(p, ts, { host: 'collector-1', job: 'j' }, 'fr_trace.txt'),
          })),
          { after: after + 1, event: spinning },
        ]),
      );
      const opened = f.filter((x) => x.state === 'open');
      expect(opened.map((x) => [x.type, x.rank, x.host, x.gpu])).toEqual([
        ['nccl_hang', 45, s.faults[0].host, s.faults[0].gpu],
      ]);
      expect(opened[0].evidence.signals).toContain('fr_not_joined');
    });

  it('a size mismatch is a code bug: a desync naming the rank, no cordon, and the hang says so', () => {
    const s = quiet();
    const f = hangs(
      run(s, [
        {
          after: 40_000,
          event: (ts) =>
            fr(ts, 'size_mismatch', {
              rank: 45,
              error_type: 'SIZE_OR_SYNTAX_MISMATCH',
              host: 'gpu-0005',
              gpu: 5,
            }),
        },
      ]),
    );
    const desync = f.find((x) => x.type === 'nccl_desync')!;
    expect(desync).toMatchObject({ state: 'open', rank: 45, host: 'gpu-0005', gpu: 5, action: 'none' });
    expect(desync.summary).toContain("a bug in the job's code, not the hardware");
    expect(f.every((x) => x.action === 'none' || x.action === 'watch')).toBe(true);
    const hang = f.filter((x) => x.type === 'nccl_hang');
    expect(hang.at(-1)).toMatchObject({ action: 'none', related: [desync.id] });
    expect(hang.every((x) => x.action !== 'cordon')).toBe(true);
  });

  it('a Flight Recorder report alone, of a job nothing else was heard from, is a finding with its names', () => {
    const runner = new DetectorRunner();
    runner.push(fr(1_764_480_000_000, 'not_joined', { rank: 7, missing_ranks: [7], host: 'node-3', gpu: 7 }));
    expect(runner.take().findings).toEqual([]);
    // The end of the input (or the next event) says the report is whole.
    runner.flush();
    const f = runner.take().findings;
    expect(f.map((x) => [x.type, x.job, x.host, x.gpu, x.rank])).toEqual([
      ['nccl_hang', 'j', 'node-3', 7, 7],
    ]);
  });
});
