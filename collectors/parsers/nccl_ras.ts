/**
 * NCCL RAS status (NCCL ≥ 2.24: the `ncclras` client, or `STATUS` on the RAS port 28028) → what is
 * abnormal in it: processes RAS cannot reach (unresponsive) or has given up on (dead), ranks a
 * communicator is missing, ranks whose operation counts differ from their peers' (behind / ahead),
 * and communicator errors. Both outputs: the text report (src/ras/client_support.cc) and, from NCCL
 * 2.28.7, JSON (`SET FORMAT json`; every rank's raw status and counts).
 *
 * Text: "Job summary", the "Communicators" table (group, comms, nodes, ranks per comm, status,
 * errors), then "Errors" (INCOMPLETE / DEAD processes, "#g-c (hash) INCOMPLETE" missing ranks,
 * "#g-c (hash) ERROR" initialization and asynchronous errors) and "Warnings" (TIMEOUT,
 * "#g-c (hash) MISMATCH": different status, different operation counts — "30 ranks have launched
 * up to operation 640 / 2 ranks … 641 / Rank 12 -- GPU 4 managed by process 323032 on node
 * 10.137.190.124"). RAS prints only the outliers' ranks; the largest group's count is the peers'.
 * Ranks are communicator ranks, nodes are IP addresses, GPUs CUDA device indexes ("4 (NVML 6)"
 * when CUDA_VISIBLE_DEVICES remaps them). Spellings of 2.24 ("collective operation counts", "The
 * missing rank: 21", "The unknown ranks") and of 2.26 on (per-operation counts, NOCOMM) are read.
 *
 * "OK" is not proof of health: RAS compares only what it counts (NVIDIA/nccl#1730 shows OK while
 * PyTorch's watchdog timed out), and counts differ briefly in a healthy busy job. Judging is the
 * hang detector's.
 */
import type { FaultEvent as F } from '../../schema/events.js';
import { collectiveOp } from './collective_op.js';
import { type Open, type ParseProblem, problem, splitLines } from './problems.js';

export type RasState = 'missing' | 'unresponsive' | 'dead' | 'behind' | 'ahead' | 'comm_error';

export interface RasObservation {
  ras: RasState;
  /** The node as RAS prints it (an IP address), when it says. */
  node?: string;
  pid?: number;
  /** CUDA device index. */
  gpu?: number;
  /** NVML index, when it differs from the CUDA one. */
  nvmlGpu?: number;
  /** Communicator hash, 16 lowercase hex digits. */
  comm?: string;
  commRank?: number;
  nranks?: number;
  /** The operation counted, as RAS names it ("AllGather"; "collective" before 2.26). */
  opRaw?: string;
  ops?: number;
  peersOps?: number;
  /** The NCCL error RAS reports ("Remote process error", "init_state 3"). */
  code?: string;
  message: string;
}

export interface RasStatus {
  format: 'text' | 'json';
  ncclVersion?: string;
  nodes?: number;
  processes?: number;
  gpus?: number;
  /** Communicator groups of the text table. */
  comms: { group: number; comms: number; ranksPerComm: number; status: string; errors: string }[];
  /** Communication timeouts RAS met while gathering (its data may be incomplete). */
  timeouts?: number;
  observations: RasObservation[];
}

const GPU = String.raw`(\d+)(?: \(NVML (\d+)\))?`;
const WHERE = String.raw`GPU ${GPU} managed by process (\d+) on node (\S+)`;
const RE = {
  version: /^NCCL version (\S+)/,
  tableRow: /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)\s*$/,
  section: /^(Errors|Warnings)$/,
  commHead: /^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) ([A-Z]+)\s*$/,
  processes: /^\s*Process (\d+) on node (\S+) managing GPUs? ([\d,]+)(?: \(NVML ([\d,]+)\))?/,
  rankWhere: new RegExp(
    String.raw`^\s*Rank (\d+)(?: (has launched up to operation (\d+)|has not launched any operations|has status ([A-Z]+)|reported (.+?)))? -- ${WHERE}`,
  ),
  rankUnknown:
    /^\s*Rank (\d+)(?: (has launched up to operation (\d+)|has not launched any operations|has status ([A-Z]+)|reported (.+?)))? -- \[process information not found\]/,
  groupCount:
    /^\s*(\d+) ranks have (?:launched up to operation (\d+)|(not launched any operations)|status ([A-Z]+)|reported (.+))$/,
  missingRanks: /^\s*The missing ranks?: ([\d, ]+)/,
  opCounts: /^\s*Communicator ranks have different (\S+) operation counts/,
  statusDiff: /^\s*Communicator ranks have different status/,
  errorsOn: /^\s*(Initialization|Asynchronous) errors? on (\d+) ranks?/,
  timeouts: /^\s*Encountered (\d+) communication timeouts?/,
};

/** "cf264af53edbe986", "0xae94423cfbb2ef4a" → 16 lowercase hex digits, so text and JSON agree. */
export const commHash = (h: string) => h.replace(/^0x/i, '').toLowerCase().padStart(16, '0');

interface Block {
  head: string;
  comm?: string;
  group?: number;
  kind: string;
  lines: string[];
}

/** Reads the text report. Lines it does not know (other output pasted around it) are skipped. */
export function parseRasText(text: string): { status: RasStatus; problems: ParseProblem[] } {
  const status: RasStatus = { format: 'text', comms: [], observations: [] };
  const problems: ParseProblem[] = [];
  const lines = splitLines(text);
  let section: 'head' | 'table' | 'Errors' | 'Warnings' = 'head';
  let block: Block | undefined;
  const blocks: Block[] = [];
  lines.forEach((line, i) => {
    const v = RE.version.exec(line);
    if (v) status.ncclVersion = v[1];
    if (/^Group\s+Comms\s+Nodes/.test(line)) section = 'table';
    const s = RE.section.exec(line.trim());
    if (s && /^=+$/.test(lines[i + 1]?.trim() ?? '')) {
      section = s[1] as 'Errors' | 'Warnings';
      block = undefined;
      return;
    }
    if (section === 'head') {
      // The totals row under "(total) … (total)": 5 numbers (nodes, processes per node, GPUs per
      // process, processes, GPUs) or, when nodes differ, 3 (nodes, processes, GPUs).
      const nums = /^\s*[\d\s]+$/.test(line) ? line.trim().split(/\s+/).map(Number) : [];
      if (/^\(total\)/.test(lines[i - 1] ?? '') && (nums.length === 5 || nums.length === 3)) {
        status.nodes = nums[0];
        status.processes = nums.length === 5 ? nums[3] : nums[1];
        status.gpus = nums.length === 5 ? nums[4] : nums[2];
      }
      return;
    }
    const t = line.trimEnd();
    const r = section === 'table' ? RE.tableRow.exec(line) : null;
    if (r) {
      status.comms.push({
        group: Number(r[1]),
        comms: Number(r[2]),
        ranksPerComm: Number(r[5]),
        status: r[7],
        errors: r[8],
      });
      return;
    }
    // An excerpt may go from the table straight to a communicator's block.
    if (section === 'table') {
      if (!RE.commHead.test(t)) return;
      section = 'Warnings';
    }
    if (t === '') {
      block = undefined;
      return;
    }
    const head = RE.commHead.exec(t);
    if (head || /^(INCOMPLETE|DEAD|TIMEOUT)$/.test(t)) {
      block = head
        ? { head: t, comm: commHash(head[3]), group: Number(head[1]), kind: head[4], lines: [] }
        : { head: t, kind: t, lines: [] };
      blocks.push(block);
      return;
    }
    if (block && /^\s/.test(line)) block.lines.push(t.trim());
  });
  for (const b of blocks) readBlock(b, status, problems);
  // A communicator's missing rank whose process RAS lists as dead or unresponsive is that.
  const byProcess = new Map(
    status.observations.filter((o) => o.comm === undefined).map((o) => [`${o.node}|${o.pid}`, o.ras]),
  );
  for (const o of status.observations)
    if (o.ras === 'missing' && o.pid !== undefined) o.ras = byProcess.get(`${o.node}|${o.pid}`) ?? o.ras;
  return { status, problems };
}

function where(m: RegExpExecArray, at: number) {
  const gpu = Number(m[at]);
  const nvml = m[at + 1] !== undefined ? Number(m[at + 1]) : undefined;
  return {
    gpu,
    ...(nvml !== undefined && nvml !== gpu ? { nvmlGpu: nvml } : {}),
    pid: Number(m[at + 2]),
    node: m[at + 3],
  };
}

function readBlock(b: Block, status: RasStatus, problems: ParseProblem[]): void {
  const nranks =
    b.group !== undefined ? status.comms.find((c) => c.group === b.group)?.ranksPerComm : undefined;
  const base = {
    ...(b.comm ? { comm: b.comm } : {}),
    ...(nranks ? { nranks } : {}),
  };
  const msg = (...parts: (string | undefined)[]) => `${b.head}: ${parts.filter(Boolean).join('; ')}`;
  /** A comm rank that cannot be one (RAS output garbled, as in NVIDIA/nccl#1762) is refused. */
  const plausible = (rank: number, line: string) => {
    if ((nranks !== undefined && rank >= nranks) || rank > 2 ** 31 - 1) {
      problems.push(
        problem(
          0,
          `${b.head}: rank ${rank} in a communicator of ${nranks} ranks: RAS output likely corrupt`,
          line,
        ),
      );
      return false;
    }
    return true;
  };
  const out = status.observations;
  if (b.kind === 'TIMEOUT') {
    const m = b.lines.map((l) => RE.timeouts.exec(l)).find(Boolean);
    if (m) status.timeouts = Number(m[1]);
    return;
  }
  if (b.head === 'INCOMPLETE' || b.head === 'DEAD') {
    for (const l of b.lines) {
      const p = RE.processes.exec(l);
      if (!p) continue;
      const gpus = p[3].split(',').map(Number);
      const nvml = p[4]?.split(',').map(Number);
      out.push({
        ras: b.head === 'DEAD' ? 'dead' : 'unresponsive',
        pid: Number(p[1]),
        node: p[2],
        ...(gpus.length === 1 ? { gpu: gpus[0] } : {}),
        ...(nvml?.length === 1 && nvml[0] !== gpus[0] ? { nvmlGpu: nvml[0] } : {}),
        message: msg(b.lines[0], l),
      });
    }
    return;
  }
  if (b.kind === 'INCOMPLETE') {
    for (const l of b.lines) {
      const m = RE.rankWhere.exec(l);
      const u = m ? undefined : (RE.rankUnknown.exec(l) ?? undefined);
      const list = RE.missingRanks.exec(l);
      const ranks =
        m || u ? [Number((m ?? u)![1])] : list ? list[1].split(',').map((x) => Number(x.trim())) : [];
      const cut = ranks.length ? undefined : /^\s*Rank (\d+)/.exec(l);
      if (cut && plausible(Number(cut[1]), l))
        problems.push(problem(0, `${b.head}: a rank line cut short`, l));
      for (const commRank of ranks)
        if (plausible(commRank, l))
          out.push({
            ras: 'missing',
            ...base,
            commRank,
            ...(m ? where(m, 6) : {}),
            message: msg(b.lines[0], l),
          });
    }
    return;
  }
  if (b.kind === 'ERROR') {
    let what: string | undefined;
    let code: string | undefined;
    for (const l of b.lines) {
      const e = RE.errorsOn.exec(l);
      if (e) {
        what = l;
        code = undefined;
        continue;
      }
      const g = RE.groupCount.exec(l);
      if (g?.[5]) {
        code = g[5];
        continue;
      }
      const m = RE.rankWhere.exec(l);
      if (m && plausible(Number(m[1]), l))
        out.push({
          ras: 'comm_error',
          ...base,
          commRank: Number(m[1]),
          code: m[5] ?? code,
          ...where(m, 6),
          message: msg(what, l),
        });
    }
    return;
  }
  if (b.kind === 'MISMATCH') readMismatch(b, base, msg, plausible, out);
}

/** "different status" (ABORT ranks become comm_error) and "different … operation counts". */
function readMismatch(
  b: Block,
  base: { comm?: string; nranks?: number },
  msg: (...parts: (string | undefined)[]) => string,
  plausible: (rank: number, line: string) => boolean,
  out: RasObservation[],
): void {
  let part: { kind: 'status' | 'ops'; head: string; opRaw?: string } | undefined;
  /** Count groups of the current part, in RAS's order (most ranks first): value, ranks, line. */
  let groups: { value: number | string; n: number; line: string }[] = [];
  const ranksOf: { rank: number; value: number | string; line: string; at?: ReturnType<typeof where> }[] = [];
  const flush = () => {
    if (part?.kind === 'ops' && groups.length >= 2) {
      const major = groups[0];
      const second = groups[1];
      for (const r of ranksOf) {
        // The peers: a strict majority's own ranks (printed only in verbose output) are not outliers.
        if (r.value === major.value && major.n > second.n) continue;
        const v = r.value as number;
        const ref = r.value === major.value ? (second.value as number) : (major.value as number);
        if (v === ref) continue;
        out.push({
          ras: v < ref ? 'behind' : 'ahead',
          ...base,
          commRank: r.rank,
          opRaw: part.opRaw,
          ops: v,
          peersOps: ref,
          ...(r.at ?? {}),
          message: msg(part.head, groups.find((g) => g.value === ref)?.line, r.line),
        });
      }
    }
    if (part?.kind === 'status')
      for (const r of ranksOf)
        if (r.value === 'ABORT')
          out.push({
            ras: 'comm_error',
            ...base,
            commRank: r.rank,
            code: 'ABORT',
            ...(r.at ?? {}),
            message: msg(part.head, r.line),
          });
    groups = [];
    ranksOf.length = 0;
  };
  for (const l of b.lines) {
    const ops = RE.opCounts.exec(l);
    if (ops || RE.statusDiff.test(l)) {
      flush();
      part = ops ? { kind: 'ops', head: l, opRaw: ops[1] } : { kind: 'status', head: l };
      continue;
    }
    if (!part) continue;
    const g = RE.groupCount.exec(l);
    if (g) {
      const value = g[2] !== undefined ? Number(g[2]) : g[3] ? 0 : (g[4] ?? g[5]);
      groups.push({ value, n: Number(g[1]), line: l });
      continue;
    }
    const m = RE.rankWhere.exec(l) ?? RE.rankUnknown.exec(l);
    const bare = m ? undefined : /^\s*Rank (\d+) has status ([A-Z]+)\s*$/.exec(l);
    if (!m && !bare) continue;
    const rank = Number((m ?? bare)![1]);
    if (!plausible(rank, l)) continue;
    // "Rank R has launched up to operation K --": a group of one; "Rank R --": a member of the
    // group counted on the line before.
    const own =
      m?.[3] !== undefined ? Number(m[3]) : m?.[2]?.startsWith('has not') ? 0 : (m?.[4] ?? bare?.[2]);
    const value = own ?? groups.at(-1)?.value;
    if (value === undefined) continue;
    if (own !== undefined) groups.push({ value, n: 1, line: l });
    ranksOf.push({
      rank,
      value,
      line: l,
      ...(m && m.length > 6 && m[6] !== undefined ? { at: where(m as RegExpExecArray, 6) } : {}),
    });
  }
  flush();
}

interface JsonRank {
  rank?: number;
  host?: string;
  pid?: number;
  cuda_dev?: number;
  nvml_dev?: number;
  status?: Record<string, unknown> | null;
  collective_counts?: Record<string, number>;
}

/** ncclResult_t names, for init_state / async_error codes. */
const NCCL_RESULT = [
  'ncclSuccess',
  'ncclUnhandledCudaError',
  'ncclSystemError',
  'ncclInternalError',
  'ncclInvalidArgument',
  'ncclInvalidUsage',
  'ncclRemoteError',
  'ncclInProgress',
  'ncclTimeout',
];

/** Reads the JSON output (NCCL ≥ 2.28.7). */
export function parseRasJson(text: string): { status: RasStatus; problems: ParseProblem[] } {
  const status: RasStatus = { format: 'json', comms: [], observations: [] };
  const problems: ParseProblem[] = [];
  let doc: {
    nccl_version?: string;
    communicators?: {
      hash?: string;
      size?: number;
      ranks?: JsonRank[];
      missing_ranks?: JsonRank[];
    }[];
    ras?: { timeouts_count?: number };
  };
  try {
    doc = JSON.parse(text);
  } catch (err) {
    return {
      status,
      problems: [problem(0, `RAS JSON cut or garbled: ${(err as Error).message}`, text.slice(-80))],
    };
  }
  if (!doc || typeof doc !== 'object' || !Array.isArray(doc.communicators))
    return {
      status,
      problems: [problem(0, 'JSON without "communicators": not RAS output', text.slice(0, 80))],
    };
  status.ncclVersion = doc.nccl_version;
  if (typeof doc.ras?.timeouts_count === 'number') status.timeouts = doc.ras.timeouts_count;
  const out = status.observations;
  const at = (r: JsonRank) => ({
    ...(typeof r.host === 'string' && r.host !== 'unknown' ? { node: r.host } : {}),
    ...(typeof r.pid === 'number' && r.pid >= 0 ? { pid: r.pid } : {}),
    ...(typeof r.cuda_dev === 'number' ? { gpu: r.cuda_dev } : {}),
    ...(typeof r.nvml_dev === 'number' && r.nvml_dev !== r.cuda_dev ? { nvmlGpu: r.nvml_dev } : {}),
  });
  const where = (r: JsonRank) => `rank ${r.rank} (GPU ${r.cuda_dev}, process ${r.pid} on node ${r.host})`;
  doc.communicators.forEach((c, ci) => {
    if (typeof c?.hash !== 'string' || !Array.isArray(c.ranks)) {
      problems.push(problem(0, `communicator ${ci} without hash or ranks`, JSON.stringify(c).slice(0, 120)));
      return;
    }
    const base = {
      comm: commHash(c.hash),
      ...(typeof c.size === 'number' && c.size > 0 ? { nranks: c.size } : {}),
    };
    const head = `communicator ${base.comm} (${c.size} ranks)`;
    const ok = (r: JsonRank) => {
      const fine =
        typeof r?.rank === 'number' && r.rank >= 0 && (base.nranks === undefined || r.rank < base.nranks);
      if (!fine)
        problems.push(
          problem(0, `${head}: rank ${r?.rank} cannot be one of its ranks: RAS output likely corrupt`, ''),
        );
      return fine;
    };
    for (const r of c.missing_ranks ?? []) {
      if (!ok(r)) continue;
      const s = r.status ?? {};
      const ras: RasState = s.considered_dead ? 'dead' : s.unresponsive ? 'unresponsive' : 'missing';
      const why = ras === 'missing' ? 'reachable but not a member (NOCOMM)' : ras;
      out.push({ ras, ...base, commRank: r.rank, ...at(r), message: `${head}: missing ${where(r)}: ${why}` });
    }
    const counts = new Map<string, Map<number, number[]>>();
    for (const r of c.ranks) {
      if (!ok(r)) continue;
      const s = r.status;
      if (!s || typeof s !== 'object') {
        // NCCL 2.29 can send null status for a communicator still initializing (NVIDIA/nccl#2346).
        problems.push(problem(0, `${head}: rank ${r.rank} without a status`, ''));
        continue;
      }
      const bad: string[] = [];
      for (const k of ['init_state', 'async_error'] as const) {
        const code = s[k];
        if (typeof code === 'number' && code !== 0 && code !== 7)
          bad.push(`${k} ${code} (${NCCL_RESULT[code] ?? '?'})`);
      }
      if (s.abort_flag === true) bad.push('aborted');
      if (bad.length)
        out.push({
          ras: 'comm_error',
          ...base,
          commRank: r.rank,
          code: bad.join(', '),
          ...at(r),
          message: `${head}: ${where(r)}: ${bad.join(', ')}`,
        });
      for (const [op, n] of Object.entries(r.collective_counts ?? {})) {
        if (typeof n !== 'number') continue;
        const byValue = counts.get(op) ?? new Map<number, number[]>();
        counts.set(op, byValue);
        byValue.set(n, [...(byValue.get(n) ?? []), r.rank as number]);
      }
    }
    for (const [op, byValue] of counts) {
      if (byValue.size < 2) continue;
      // As RAS ranks them: most ranks first, then the higher count.
      const groups = [...byValue.entries()].sort((a, b) => b[1].length - a[1].length || b[0] - a[0]);
      const [major, second] = groups;
      for (const [value, ranks] of groups)
        for (const rank of ranks) {
          const ref = value === major[0] ? second[0] : major[0];
          if (value === major[0] && major[1].length > second[1].length) continue;
          const r = c.ranks.find((x) => x.rank === rank)!;
          out.push({
            ras: value < ref ? 'behind' : 'ahead',
            ...base,
            commRank: rank,
            opRaw: op,
            ops: value,
            peersOps: ref,
            ...at(r),
            message: `${head}: ${where(r)} launched ${value} ${op} operations, ${byValue.get(ref)!.length} peer(s) ${ref}`,
          });
        }
    }
  });
  return { status, problems };
}

/** Text or JSON, by its first character. */
export function parseRas(text: string): { status: RasStatus; problems: ParseProblem[] } {
  return text.trimStart().startsWith('{') ? parseRasJson(text) : parseRasText(text);
}

export interface RasContext {
  /** The collector's host: for what RAS does not place on a node. */
  host: string;
  job?: string;
  /** The host name of a node address RAS prints (an IP), when it is known. */
  hostOf?(node: string): string | undefined;
}

/** One `fault` event (source `nccl_ras`) per observation. `rank` stays out: RAS speaks of
 * communicator ranks, and the mapping to global ranks is the collector's, from (host, pid). */
export function rasFaultEvent(o: RasObservation, ts: number, ctx: RasContext): Open<F> {
  const named = o.node !== undefined ? ctx.hostOf?.(o.node) : undefined;
  const op = o.opRaw ? collectiveOp(o.opRaw) : undefined;
  return {
    v: 1,
    kind: 'fault',
    ts,
    host: named ?? o.node ?? ctx.host,
    ...(o.node !== undefined ? { node_addr: o.node } : { host_source: 'collector' }),
    ...(ctx.job ? { job: ctx.job } : {}),
    ...(o.gpu !== undefined ? { gpu: o.gpu } : {}),
    source: 'nccl_ras',
    code: o.code ?? o.ras,
    message: o.message,
    ras: o.ras,
    ...(o.pid !== undefined ? { pid: o.pid } : {}),
    ...(o.nvmlGpu !== undefined ? { nvml_gpu: o.nvmlGpu } : {}),
    ...(o.comm ? { comm: o.comm } : {}),
    ...(o.commRank !== undefined ? { comm_rank: o.commRank } : {}),
    ...(o.nranks ? { nranks: o.nranks } : {}),
    ...(op ? { op } : {}),
    ...(o.opRaw ? { op_raw: o.opRaw } : {}),
    ...(o.ops !== undefined ? { ops: o.ops } : {}),
    ...(o.peersOps !== undefined ? { peers_ops: o.peersOps } : {}),
  };
}
