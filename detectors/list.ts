/**
 * Every detector, in the order the runner calls them. A new detector lives in its own folder and
 * joins here with one entry: what it reads and how it is made. The runner (detectors/runner.ts)
 * routes events by kind, drives step frames and MFU points through the job detectors, and links
 * findings that explain each other; it names no detector but the two it links (throttle and
 * straggler).
 */
import { findGpu } from '../mfu/peaks.js';
import { CheckpointAdvisor } from './checkpoint/advisor.js';
import type {
  Detector,
  DetectorContext,
  DetectorEntry,
  DetectorStage,
  EventKind,
  FleetEntry,
  JobDetector,
  JobEntry,
} from './detector.js';
import { FaultTriage } from './faults/xid.js';
import { HangDetector } from './hang/hang.js';
import { MfuDropDetector } from './mfu/drop.js';
import { NcclCheckDetector } from './nccl_tests/nccl_tests.js';
import { SlowLinkDetector } from './slowlink/slowlink.js';
import { RecurringStallDetector } from './stall/stall.js';
import type { RankTable } from './steps.js';
import { StragglerDetector } from './straggler/straggler.js';
import { ThrottleDetector } from './throttle/throttle.js';

/** What an entry makes: the detector's hooks, and the detector itself (for the runner's links). */
type Made<T, H extends Detector = Detector> = H & { detector: T };

const fleet = <T>(
  name: string,
  stage: DetectorStage,
  reads: readonly EventKind[],
  create: (ctx: DetectorContext) => Made<T>,
): FleetEntry<Made<T>> => ({ name, scope: 'fleet', stage, reads, create });

/** Job detectors need the job's steps: they run in its job stage. */
const job = <T>(
  name: string,
  reads: readonly EventKind[],
  create: (j: { id: string; ranks: RankTable }, ctx: DetectorContext) => Made<T, JobDetector>,
): JobEntry<Made<T, JobDetector>> => ({ name, scope: 'job', stage: 'job', reads, create });

/**
 * A rank slower than its own past (change tests on peer-relative compute), or chronically slower
 * than its peers at a cost worth a finding; and the job's slowest-GPUs ranking.
 */
export const STRAGGLER = job('straggler', [], (j, ctx) => {
  const d = new StragglerDetector(j.id, j.ranks, ctx.log, ctx.config.straggler);
  return {
    detector: d,
    step: (f) => d.process(f),
    restart: () => d.restart(),
    flush: () => d.flush(),
    figures: (out) => {
      out.slowGpus ??= [];
      d.takeRanking(out.slowGpus);
    },
  };
});

/** A slow network or NVLink path, from collectives compared across communicators and rails. */
export const SLOW_LINK = job('slow_link', ['collective', 'fault'], (j, ctx) => {
  const d = new SlowLinkDetector(j.id, j.ranks, ctx.log, ctx.config.slowLink);
  return {
    detector: d,
    event: (e) => {
      if (e.kind === 'collective') d.add(e);
      // An NVLink XID names the GPU a slow intra-host group runs through.
      else if (e.kind === 'fault' && e.source === 'xid' && e.code === 74 && e.gpu !== undefined)
        d.nvlinkHint(e.host, e.gpu);
    },
    reduced: (r) => d.addReduced(r),
    step: (f, stepMs) => d.onStepClosed(f.step, stepMs, f.ts),
    flush: () => d.flush(),
  };
});

/** A rank that stalls for seconds every few dozen steps (a data loader, a host process) while its peers run on. */
export const RECURRING_STALL = job('recurring_stall', ['checkpoint'], (j, ctx) => {
  const d = new RecurringStallDetector(j.id, j.ranks, ctx.log, ctx.config.stall);
  return {
    detector: d,
    event: (e) => e.kind === 'checkpoint' && d.checkpoint(e),
    step: (f, stepMs) => d.process(f, stepMs),
    restart: () => d.restart(),
    flush: (ts) => d.flush(ts),
  };
});

/** A sustained fall of the job's MFU, attributed to the open findings that cost it. */
export const MFU_DROP = job('mfu_drop', [], (j, ctx) => {
  const d = new MfuDropDetector(j.id, ctx.log, ctx.config.mfuDrop);
  return { detector: d, mfu: (p) => d.process(p, () => ctx.log.openFindings()), restart: () => d.restart() };
});

/** A GPU whose clocks are held down (thermal, power, HW slowdown), from its telemetry. */
export const THROTTLE = fleet('throttle', 'shard', ['gpu'], (ctx) => {
  const d = new ThrottleDetector(
    ctx.log,
    (job) => {
      const model = job ? ctx.jobMeta(job)?.gpu_model : undefined;
      return model ? findGpu(model)?.maxSmClockMhz : undefined;
    },
    ctx.config.throttle,
  );
  return {
    detector: d,
    event: (e) => {
      if (e.kind !== 'gpu') return;
      const owner = e.job === undefined ? ctx.ownerOf(e.host, e.gpu) : undefined;
      d.process(e, e.job ?? owner?.job, e.rank ?? owner?.rank);
    },
    flush: (ts) => d.flush(ts),
  };
});

/** nccl-tests runs: collapsed bus bandwidth, wrong results. */
export const NCCL_TESTS = fleet('nccl_check', 'job', ['check'], (ctx) => {
  const d = new NcclCheckDetector(ctx.log, ctx.config.ncclChecks);
  return { detector: d, event: (e) => e.kind === 'check' && d.process(e) };
});

/** A checkpoint interval far from Young/Daly's optimum for the job's own failure rate. */
export const CHECKPOINT_INTERVAL = fleet('checkpoint_interval', 'job', ['checkpoint', 'job_event'], (ctx) => {
  const d = new CheckpointAdvisor(
    ctx.log,
    (job) => ctx.jobMeta(job)?.world_size,
    ctx.config.checkpointInterval,
  );
  return { detector: d, event: (e) => (e.kind === 'checkpoint' || e.kind === 'job_event') && d.process(e) };
});

/**
 * XIDs and other hardware faults, triaged to an action. Faults stay keyed by job in the sharded
 * layout (the slow-link judge reads NVLink XIDs, the hang detector watchdog timeouts), so triage
 * runs in the job stage, beside them.
 */
export const XID = fleet('xid', 'job', ['fault'], (ctx) => {
  const d = new FaultTriage(ctx.log, ctx.config.triage);
  return {
    detector: d,
    event: (e) => e.kind === 'fault' && d.process(e),
    advance: (ts) => d.advance(ts),
    flush: () => d.flush(),
  };
});

/**
 * A job that stopped because one rank hung, named within a minute (steps, collectives' sequence
 * numbers, GPU samples, NCCL RAS and Flight Recorder reports), with the watchdog timeouts of the
 * peers that waited as its evidence; desyncs and collective mismatches (code bugs).
 */
export const HANG = fleet('hang', 'job', ['step', 'collective', 'gpu', 'fault'], (ctx) => {
  const d = new HangDetector(ctx.log, ctx.ownerOf, ctx.config.hang);
  return {
    detector: d,
    event: (e) => {
      if (e.kind === 'gpu') d.gpu(e);
      else if (e.kind === 'step') d.step(e);
      else if (e.kind === 'collective') d.collective(e);
      else if (e.kind === 'fault') d.fault(e);
    },
    advance: (ts) => d.advance(ts),
    jobChanged: (e) => d.jobChanged(e),
    flush: (ts) => d.flush(ts),
    forgetJob: (job) => d.forgetJob(job),
  };
});

/** In call order: job detectors see each closed step in this order, then MFU points. */
export const DETECTORS: readonly DetectorEntry[] = [
  STRAGGLER,
  SLOW_LINK,
  RECURRING_STALL,
  MFU_DROP,
  THROTTLE,
  NCCL_TESTS,
  CHECKPOINT_INTERVAL,
  XID,
  HANG,
];
