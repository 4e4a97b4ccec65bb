/**
 * Megatron-LM training logs → v1 `step` and `checkpoint` events, plus what is needed for a
 * job-level MFU cross-check (Megatron's own TFLOP/s/GPU next to ours). Stateful only to pair a
 * "successfully saved checkpoint" line with the `save-checkpoint` timer line printed after it.
 *
 * The log is one rank's view (Megatron prints the training log from the last rank), so step
 * events carry the wall time only: `compute_ms` equals `step_ms` and `timing: 'wall_only'` says so.
 *
 * It also keeps what Megatron prints about the run before training (`run()`): the arguments
 * block, the "using world size" layout line, the padded vocabulary and the parameter counts, from
 * which the source builds the job's description for MFU (collectors/parsers/megatron_job.ts).
 * Only real iteration lines ("iteration N/ M |") count as iterations: memory reports ("(after N
 * iterations) memory (MB) |") and validation lines ("validation loss at iteration N |") are
 * neither steps nor problems.
 */
import type { CheckpointEvent as C, StepEvent as S } from '../../schema/events.js';
import { type Open, type ParseProblem, problem } from './problems.js';

type StepEvent = Open<S>;
type CheckpointEvent = Open<C>;

export interface MegatronContext {
  job: string;
  rank: number;
  host: string;
  gpu: number;
  /** Tokens per sample (the sequence length), to turn the global batch size into tokens. */
  seqLen?: number;
}

export interface MegatronOut {
  events: (StepEvent | CheckpointEvent)[];
  problems: ParseProblem[];
}

const ITER = /\biteration\s+(\d+)\s*\/\s*(\d+)\s*\|(.*)$/;
/** An iteration line, whole or not: "iteration <something>/ <total>". */
const ITER_LIKE = /\biteration\s+\S+\s*\/\s*\d+/;
/** What Megatron prints on a line of its own, found glued after an iteration line's last bar. */
const GLUED = /\|\s*((?:Number of |Total number of |Theoretical memory|\[Rank \d+\] ).*)$/;
const ARGS_START = /-{4,} arguments -{4,}/;
const ARGS_END = /-{4,} end of arguments -{4,}/;
/** "  hidden_size ..................................... 4096" (timer lines have a colon after the dots). */
const ARG = /(?:^|\s)([A-Za-z_][A-Za-z0-9_]*) \.{3,} (.*?)\s*$/;
const LAYOUT = /using world size:\s*(\d+)/;
const PADDED = /padded vocab \(size: (\d+)\) with \d+ dummy tokens \(new size: (\d+)\)/;
const RANK_PARAMS = /number of parameters on \(([^)]*)\) model parallel rank \(([^)]*)\):\s*(\d+)/;
const PARAMS_DTYPE = /using torch\.(bfloat16|float16|float32) for parameters/;
const TOTAL_PARAMS = /Total number of (active )?parameters in billions:\s*([\d.]+)/;
/** Megatron's own "[2024-04-06 02:59:36]", also behind a log shipper's or launcher's prefix. */
const STAMP = /\[(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\]/;
const SAVED = /successfully saved checkpoint (?:from|at) iteration\s+(\d+) to (\S+)/;
const SAVING = /saving checkpoint at iteration\s+(\d+) to (\S+)/;
const LOADED = /successfully loaded checkpoint from (\S+).*?at iteration\s+(\d+)/;
const TIMER = /^\s*save-checkpoint\s*\.*:?\s*\(?\s*([\d.]+)(?:\s*,\s*([\d.]+))?\)?/;

/** What Megatron printed about the run before training; every field as it appeared. */
export interface MegatronRun {
  /** The arguments block, name → printed value. */
  args: Record<string, string>;
  /** From the "using world size: …" line. */
  layout: { world?: number; dp?: number; cp?: number; tp?: number; pp?: number };
  paddedVocab?: number;
  /** "using torch.bfloat16 for parameters ...": bf16, fp16 or fp32. */
  paramsDtype?: string;
  /** "number of parameters on (tensor, pipeline) model parallel rank (t, p): N", by coordinates. */
  rankParams: Map<string, number>;
  /** "Total number of parameters in billions: X" (and the active ones, for MoE). */
  totalParamsB?: number;
  activeParamsB?: number;
}

interface PendingSave {
  step: number;
  path: string;
  /** When "saving checkpoint" was seen, if it was. */
  startedAt?: number;
  doneAt: number;
}

export class MegatronParser {
  private lineNo = 0;
  private savingAt: { step: number; at: number } | undefined;
  private pending: PendingSave | undefined;
  private inArgs = false;
  readonly run: MegatronRun = { args: {}, layout: {}, rankParams: new Map() };

  constructor(private readonly ctx: MegatronContext) {}

  hasSeqLen(): boolean {
    return this.ctx.seqLen !== undefined;
  }

  /** The sequence length learnt after construction (from the log's arguments block). */
  setSeqLen(seqLen: number): void {
    this.ctx.seqLen = seqLen;
  }

  /** Sets `global_batch_tokens` on a step parsed before the sequence length was known. */
  addTokens(step: StepEvent, gbs: number): void {
    if (this.ctx.seqLen) step.global_batch_tokens = gbs * this.ctx.seqLen;
  }

  /** One log line; `now` stands in for lines without a timestamp. */
  push(line: string, now: number): MegatronOut {
    this.lineNo++;
    // CRLF logs (Windows editors, some shippers): the \r would end up in values and fields.
    const raw = line.endsWith('\r') ? line.replace(/\r+$/, '') : line;
    // Another rank's print glued to the iteration line's closing bar (no newline between them).
    const glued = ITER_LIKE.test(raw) ? GLUED.exec(raw) : null;
    if (!glued) return this.one(raw, now);
    const head = this.one(raw.slice(0, glued.index + 1), now);
    const tail = this.one(glued[1], now);
    return { events: [...head.events, ...tail.events], problems: [...head.problems, ...tail.problems] };
  }

  private one(raw: string, now: number): MegatronOut {
    const events: MegatronOut['events'] = [];
    const problems: ParseProblem[] = [];
    if (this.runLine(raw)) return { events, problems };
    const ts = stampOf(raw) ?? now;

    const timer = TIMER.exec(raw);
    if (timer && this.pending) {
      const max = Number(timer[2] ?? timer[1]);
      if (Number.isFinite(max)) events.push(this.checkpoint(this.pending, max, ts));
      this.pending = undefined;
      return { events, problems };
    }
    if (ITER_LIKE.test(raw)) {
      // A pending save whose timer line never came: fall back to the time between the lines.
      events.push(...this.flushPending());
      const m = ITER.exec(raw);
      // Megatron ends every field with " |": a line without the last bar was cut off.
      if (!m || !raw.trimEnd().endsWith('|')) {
        problems.push(problem(this.lineNo, 'iteration line in an unknown or truncated form', raw.trim()));
        return { events, problems };
      }
      const fields = parseFields(m[3]);
      const stepMs = fields['elapsed time per iteration (ms)'];
      if (stepMs === undefined) {
        problems.push(
          problem(this.lineNo, 'iteration line without "elapsed time per iteration (ms)"', raw.trim()),
        );
        return { events, problems };
      }
      const gbs = fields['global batch size'];
      const step: StepEvent = {
        v: 1,
        kind: 'step',
        ts,
        job: this.ctx.job,
        rank: this.ctx.rank,
        host: this.ctx.host,
        gpu: this.ctx.gpu,
        step: Number(m[1]),
        step_ms: stepMs,
        compute_ms: stepMs,
        timing: 'wall_only',
        train_iters: Number(m[2]),
      };
      if (gbs !== undefined) step.global_batch_size = gbs;
      if (gbs !== undefined && this.ctx.seqLen) step.global_batch_tokens = gbs * this.ctx.seqLen;
      const tf = fields['throughput per GPU (TFLOP/s/GPU)'];
      if (tf !== undefined) step.megatron_tflops_per_gpu = tf;
      const loss = fields['lm loss'];
      if (loss !== undefined) step.loss = loss;
      const skipped = fields['number of skipped iterations'];
      if (skipped !== undefined) step.skipped_iterations = skipped;
      events.push(step);
      return { events, problems };
    }
    const saving = SAVING.exec(raw);
    if (saving) {
      this.savingAt = { step: Number(saving[1]), at: ts };
      return { events, problems };
    }
    const saved = SAVED.exec(raw);
    if (saved) {
      events.push(...this.flushPending());
      const step = Number(saved[1]);
      const startedAt = this.savingAt?.step === step ? this.savingAt.at : undefined;
      this.savingAt = undefined;
      this.pending = { step, path: saved[2], startedAt, doneAt: ts };
      return { events, problems };
    }
    const loaded = LOADED.exec(raw);
    if (loaded) {
      events.push({
        v: 1,
        kind: 'checkpoint',
        ts,
        job: this.ctx.job,
        rank: this.ctx.rank,
        step: Number(loaded[2]),
        phase: 'load',
        dur_ms: 0,
        ok: true,
        path: loaded[1],
        duration_known: false,
      });
    }
    return { events, problems };
  }

  /** Keeps what the line says about the run; true when that is all it says. */
  private runLine(raw: string): boolean {
    if (ARGS_START.test(raw)) {
      this.inArgs = !ARGS_END.test(raw);
      return true;
    }
    if (this.inArgs) {
      if (ARGS_END.test(raw)) {
        this.inArgs = false;
        return true;
      }
      const a = ARG.exec(raw);
      if (a) {
        this.run.args[a[1]] = a[2];
        return true;
      }
      return false;
    }
    const layout = LAYOUT.exec(raw);
    if (layout) {
      const n = (re: RegExp) => {
        const m = re.exec(raw);
        return m ? Number(m[1]) : undefined;
      };
      this.run.layout = {
        world: Number(layout[1]),
        dp: n(/data-parallel[- ]size:\s*(\d+)/),
        cp: n(/context-parallel size:\s*(\d+)/),
        tp: n(/tensor-model-parallel size:\s*(\d+)/),
        pp: n(/pipeline-model-parallel size:\s*(\d+)/),
      };
      return true;
    }
    const dt = PARAMS_DTYPE.exec(raw);
    if (dt) {
      this.run.paramsDtype = { bfloat16: 'bf16', float16: 'fp16', float32: 'fp32' }[dt[1]];
      return true;
    }
    const padded = PADDED.exec(raw);
    if (padded) {
      this.run.paddedVocab = Number(padded[2]);
      return true;
    }
    const rank = RANK_PARAMS.exec(raw);
    if (rank) {
      this.run.rankParams.set(`${rank[1]}=${rank[2].replace(/\s+/g, '')}`, Number(rank[3]));
      return true;
    }
    const total = TOTAL_PARAMS.exec(raw);
    if (total) {
      if (total[1]) this.run.activeParamsB = Number(total[2]);
      else this.run.totalParamsB = Number(total[2]);
      return true;
    }
    return false;
  }

  /** Emits a save still waiting for its timer line (call at end of input). */
  flushPending(): MegatronOut['events'] {
    if (!this.pending) return [];
    const p = this.pending;
    this.pending = undefined;
    const dur = p.startedAt !== undefined ? p.doneAt - p.startedAt : undefined;
    return [this.checkpoint(p, dur, p.doneAt)];
  }

  private checkpoint(p: PendingSave, durMs: number | undefined, ts: number): CheckpointEvent {
    return {
      v: 1,
      kind: 'checkpoint',
      ts,
      job: this.ctx.job,
      rank: this.ctx.rank,
      step: p.step,
      phase: 'save',
      dur_ms: Math.max(0, durMs ?? 0),
      ok: true,
      path: p.path,
      ...(durMs === undefined ? { duration_known: false } : {}),
    };
  }
}

/** "consumed samples: 51200 | elapsed time per iteration (ms): 1234.5 | …" → numbers by name. */
function parseFields(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of text.split('|')) {
    const i = part.lastIndexOf(':');
    if (i < 0) continue;
    const n = Number(part.slice(i + 1).trim());
    if (part.slice(i + 1).trim() !== '' && Number.isFinite(n)) out[part.slice(0, i).trim()] = n;
  }
  return out;
}

function stampOf(line: string): number | undefined {
  const m = STAMP.exec(line);
  if (!m) return undefined;
  const [, y, mo, d, h, mi, s, frac] = m;
  return new Date(+y, +mo - 1, +d, +h, +mi, +s, Number((frac ?? '0').slice(0, 3).padEnd(3, '0'))).getTime();
}

export interface MfuCrossCheck {
  megatron_tflops_per_gpu: number;
  ours_tflops_per_gpu: number;
  /** ours / Megatron's: 1 when both count FLOPs the same way. */
  ratio: number;
}

/** Our TFLOP/s/GPU for a step, from FLOPs per token, set next to Megatron's own figure. */
export function mfuCrossCheck(
  step: { step_ms: number; global_batch_tokens?: unknown; megatron_tflops_per_gpu?: unknown },
  flopsPerToken: number,
  gpus: number,
): MfuCrossCheck | undefined {
  const tokens = Number(step.global_batch_tokens);
  const theirs = Number(step.megatron_tflops_per_gpu);
  if (!(tokens > 0) || !(theirs > 0) || !(step.step_ms > 0) || !(gpus > 0)) return undefined;
  const ours = (flopsPerToken * tokens) / (step.step_ms / 1000) / gpus / 1e12;
  return { megatron_tflops_per_gpu: theirs, ours_tflops_per_gpu: ours, ratio: ours / theirs };
}
