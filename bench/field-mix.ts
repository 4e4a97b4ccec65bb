/**
 * A recorded file with the field's mix: what the node collectors of a 1,024-GPU Megatron-style
 * 70B run (tp 8, pp 4, dp 32; 128 hosts of 8 GPUs; a step every 5 s) send, in their own shapes.
 *
 * Rates, per GPU, from the collectors' pages:
 * - `gpu`: one per GPU per scrape, at 1 Hz (docs/collectors/dcgm-exporter.md and nvidia-smi.md,
 *   `intervalMs` 1000): 5 per 5 s step. Each is the dcgm_exporter parser's own output for the
 *   dcgm-k8s.prom fixture (Kubernetes labels, the default fields plus clock-event reasons), its
 *   host, GPU, pod, time and readings moved.
 * - `collective`: 8 per GPU and step after the edge reduction (docs/collectors/nccl-inspector.md,
 *   "1.6 after the reduction (8 per GPU and step)", bench/inspector.bench.ts): tensor-parallel
 *   all-gather and reduce-scatter, a send and a recv to each pipeline neighbour, data-parallel
 *   reduce-scatter and all-gather; in the reduced record's shape (count, max_ms, seq, busbw_gbs,
 *   peer and peer_host for p2p).
 * - `step`: one per rank and step, as the Python hook sends it (docs/collectors/python-hook.md:
 *   pid, stage, tokens, comm_wait_ms from CUDA events, `timing`).
 * - `checkpoint`: one per rank every 100 steps (the hook's `rw.checkpoint()`); `job`: once, from
 *   rank 0; `fault`: a few kernel-log XIDs (kernel_xid parser output for the kernel-xid.log fixture).
 * With 6 collectives on the first and last stage (one pipeline neighbour), 13 events per GPU and
 * step on average: 38% gpu samples, 54% collectives, 8% steps, faults rare.
 */
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { dcgmToEvents } from '../collectors/parsers/dcgm.js';
import { parseKernelLine } from '../collectors/parsers/kernel_xid.js';
import { Random } from '../core/random.js';
import { MODELS } from '../sim/models.js';

export const FIELD_MIX = {
  gpusPerHost: 8,
  tp: 8,
  pp: 4,
  stepMs: 5000,
  gpuSampleMs: 1000,
  collectivesPerStep: 8,
  checkpointEvery: 100,
};

const JOB = 'llama-70b';
const T0 = Date.UTC(2026, 10, 30, 5);
// The parsers' fixtures stay in the source tree: two folders up from dist/bench, one from bench/.
const FIXTURES = join(
  import.meta.dirname,
  basename(dirname(import.meta.dirname)) === 'dist' ? '../..' : '..',
  'collectors/parsers/fixtures',
);

/** The dcgm_exporter parser's event for GPU 0 of the Kubernetes fixture: the shape every sample takes. */
function gpuTemplate(): Record<string, unknown> {
  const text = readFileSync(join(FIXTURES, 'dcgm-k8s.prom'), 'utf8');
  const e = dcgmToEvents(text, T0, { host: 'unset' }, new Map()).events.find((x) => x.kind === 'gpu');
  if (!e) throw new Error('dcgm-k8s.prom gave no gpu event');
  return e as Record<string, unknown>;
}

/** The kernel_xid parser's event for the fixture's first XID line. */
function faultTemplate(): Record<string, unknown> {
  const line = readFileSync(join(FIXTURES, 'kernel-xid.log'), 'utf8').split('\n')[0];
  const r = parseKernelLine(line, 1, T0, { host: 'unset', pciToGpu: new Map([['0000:3b:00', 3]]) });
  if (!('event' in r)) throw new Error('kernel-xid.log gave no fault event');
  return r.event as Record<string, unknown>;
}

const host = (h: number) => `gpu-${String(h).padStart(4, '0')}`;

/** Writes `steps` steps of a `gpus`-GPU job to `file` (JSON lines, event-time order); returns the event count. */
export function writeFieldMixFile(file: string, gpus = 1024, steps = 40, seed = 7): number {
  const { gpusPerHost, tp, pp, stepMs, gpuSampleMs } = FIELD_MIX;
  const dp = gpus / (tp * pp);
  if (!Number.isInteger(dp) || gpus % gpusPerHost !== 0)
    throw new Error(`${gpus} GPUs do not fit tp 8 × pp 4`);
  const hosts = gpus / gpusPerHost;
  const rnd = new Random(seed);
  const sample = gpuTemplate();
  const faultT = faultTemplate();
  const fd = openSync(file, 'w');
  let buf: string[] = [];
  let n = 0;
  const put = (e: unknown) => {
    buf.push(JSON.stringify(e));
    n++;
    if (buf.length === 20_000) {
      writeSync(fd, `${buf.join('\n')}\n`);
      buf = [];
    }
  };
  // Megatron order: tp innermost (one host), then dp, pp outermost.
  const stageOf = (r: number) => Math.floor(r / (tp * dp));
  const hostOf = (r: number) => Math.floor(r / gpusPerHost);
  const seq = new Map<string, number>();
  const nextSeq = (k: string) => {
    const s = (seq.get(k) ?? 0) + 1;
    seq.set(k, s);
    return s;
  };
  try {
    put({
      v: 1,
      kind: 'job',
      ts: T0,
      job: JOB,
      world_size: gpus,
      gpu_model: 'H100-SXM',
      dtype: 'bf16',
      parallel: { tp, pp, dp },
      model: MODELS['llama-70b'],
      global_batch_tokens: 512 * 8192,
    });
    for (let s = 0; s < steps; s++) {
      const start = T0 + s * stepMs;
      for (let t = start; t < start + stepMs; t += gpuSampleMs)
        for (let h = 0; h < hosts; h++)
          for (let g = 0; g < gpusPerHost; g++) {
            // One object rewritten per sample (its keys stay in the parser's order): writing
            // half a million spread copies took longer than the bench itself.
            sample.ts = t + h;
            sample.host = host(h);
            sample.gpu = g;
            sample.uuid = `GPU-5f1c6a3e-9d1b-4c2e-8f7a-${String(h * gpusPerHost + g).padStart(12, '0')}`;
            sample.pod = `${JOB}-worker-${h}`;
            sample.sm_clock_mhz = 1980 - 15 * rnd.int(3);
            sample.temp_c = 55 + rnd.int(15);
            sample.power_w = Math.round((600 + 60 * rnd.next()) * 1000) / 1000;
            sample.tensor_active_pct = Math.round(4000 + 300 * rnd.next()) / 100;
            put(sample);
          }
      if (s === Math.floor(steps / 3) || s === Math.floor((2 * steps) / 3))
        put({ ...faultT, ts: start + 1234, host: host(rnd.int(hosts)), gpu: rnd.int(gpusPerHost) });
      const end = start + stepMs;
      // As a live job interleaves them: the step's step events (the hook sends each at once),
      // then its collectives (the collector reduces them once the step's end is known).
      for (let r = 0; r < gpus; r++) {
        const stage = stageOf(r);
        const compute = 4300 * (1 + 0.015 * rnd.normal()) * (stage === pp - 1 ? 1.05 : 1);
        const where = { job: JOB, rank: r, host: host(hostOf(r)), gpu: r % gpusPerHost };
        // The hook's step event, keys in its order (collectors/python/rankwatch_hook/_hook.py).
        put({
          v: 1,
          kind: 'step',
          ts: end + (r % 7),
          ...where,
          step: s,
          step_ms: stepMs,
          pid: 30_000 + where.gpu,
          stage,
          tokens: 512 * 8192,
          comm_wait_ms: Math.round((stepMs - compute) * 1000) / 1000,
          compute_ms: Math.round(compute * 1000) / 1000,
          timing: 'cuda_events',
        });
        if ((s + 1) % FIELD_MIX.checkpointEvery === 0)
          put({
            v: 1,
            kind: 'checkpoint',
            ts: end + 100,
            ...where,
            step: s,
            phase: 'save',
            dur_ms: 21_000,
            bytes: 2 ** 30,
            ok: true,
          });
      }
      for (let r = 0; r < gpus; r++) {
        const h = hostOf(r);
        const g = r % gpusPerHost;
        const stage = stageOf(r);
        // One reduced record per communicator and op: `count` operations, their summed bytes and time.
        const coll = (
          op: string,
          comm: string,
          nranks: number,
          bytes: number,
          count: number,
          p2p?: object,
        ) => {
          const each = (bytes / count / 40e6) * (1 + 0.04 * rnd.normal());
          const e = {
            v: 1,
            kind: 'collective',
            ts: end - 50 + (r % 13),
            job: JOB,
            rank: r,
            host: host(h),
            gpu: g,
            step: s,
            op,
            comm,
            nranks,
            bytes,
            dur_ms: Math.round(each * count * 1000) / 1000,
            count,
            max_ms: Math.round(each * 1.2 * 1000) / 1000,
            seq: nextSeq(`${r}/${comm}/${op}`) * count,
            busbw_gbs: Math.round((bytes / count / each / 1e6) * 1000) / 1000,
          };
          put(p2p ? Object.assign(e, p2p) : e);
        };
        const act = 4096 * 8192 * 2; // a micro-batch's activations, bf16
        const tpComm = `0x7a11${h.toString(16).padStart(4, '0')}`;
        coll('allgather', tpComm, tp, act * 640, 640);
        coll('reducescatter', tpComm, tp, act * 640, 640);
        // The first and last stage have one pipeline neighbour: 6 records per step there, 8 elsewhere.
        for (const dir of [-1, 1]) {
          const peer = r + dir * tp * dp;
          if (peer < 0 || peer >= gpus) continue;
          const comm = `0x9900${Math.min(r, peer).toString(16).padStart(5, '0')}`;
          const p2p = { peer, peer_host: host(hostOf(peer)) };
          coll('send', comm, 2, act, 8, p2p);
          coll('recv', comm, 2, act, 8, p2p);
        }
        const dpComm = `0x5d00${(stage * tp + g).toString(16).padStart(4, '0')}`;
        coll('reducescatter', dpComm, dp, (40 << 20) * 20, 20);
        coll('allgather', dpComm, dp, (40 << 20) * 20, 20);
      }
    }
    if (buf.length) writeSync(fd, `${buf.join('\n')}\n`);
  } finally {
    closeSync(fd);
  }
  return n;
}
