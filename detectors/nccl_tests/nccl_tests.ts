/**
 * Judges nccl-tests runs (`check` events, tool `nccl-tests`): corrupted data, a bus bandwidth
 * collapse between adjacent sizes, bandwidth below the best known run of the same test and host
 * count (or a configured expectation) per size band, and across pairwise (2-host) runs the host
 * common to the slow pairs. A later run on the same hosts that is clean resolves what it no
 * longer shows. Pure: state, events and config in; findings out through the FindingLog.
 */
import { round } from '../../core/round.js';
import type { CheckEvent } from '../../schema/events.js';
import type { FindingDraft, FindingLog } from '../findings.js';
import { findingId } from '../findings.js';

export interface NcclCheckConfig {
  /** A band below this share of the best known run (same test, host count, ranks, GPU model) is low. */
  lowRatio: number;
  /** A size whose bus bandwidth is below this share of the previous size's is a collapse. */
  collapseRatio: number;
  /** Sizes below this are latency-bound: not judged for bandwidth. */
  minBytes: number;
  /** A collapse must fall from at least this bus bandwidth (GB/s), so noise near zero is none. */
  collapseMinGbs: number;
  /** Configured busbw (GB/s) of the large band per test binary, e.g. { all_reduce_perf: 360 }. */
  expectedGbs: Record<string, number>;
  /** Slow pairs through one host before it is named. */
  minSlowPairs: number;
}

export const NCCL_CHECK_DEFAULTS: NcclCheckConfig = {
  lowRatio: 0.8,
  collapseRatio: 0.5,
  minBytes: 1 << 20,
  collapseMinGbs: 1,
  expectedGbs: {},
  minSlowPairs: 2,
};

/** Size bands: bandwidth keeps growing with size up to tens of MB, so bands compare like with like. */
const BANDS = [
  { name: 'medium', from: 1 << 20, to: 64 << 20 },
  { name: 'large', from: 64 << 20, to: Number.POSITIVE_INFINITY },
] as const;

interface Row {
  bytes: number;
  dtype?: string;
  redop?: string;
  in_place?: boolean;
  busbw_gbs: number;
  wrong?: number;
}

interface Run {
  ts: number;
  test: string;
  hosts: string[];
  nranks: number;
  /** GPU model as the run printed it: runs on other GPUs are no reference. */
  gpu: string;
  rows: Row[];
  complete: boolean;
  wrong: number;
  outOfBounds: number;
  expected?: number;
}

const GB = (v: number) => round(v, 2);

export class NcclCheckDetector {
  /** Best band figure per test|hosts count|ranks|band, and the run it came from. */
  private readonly best = new Map<string, { gbs: number; ts: number; hosts: string[] }>();
  /** Latest figure per pair (2-host runs), per test|ranks. */
  private readonly pairs = new Map<string, Map<string, { hosts: [string, string]; gbs: number }>>();
  /** Open finding id per type|test|hosts. */
  private readonly open = new Map<string, string>();

  constructor(
    private readonly log: FindingLog,
    private readonly cfg: NcclCheckConfig = NCCL_CHECK_DEFAULTS,
  ) {}

  process(e: CheckEvent): void {
    const run = toRun(e);
    if (!run) return;
    const where = run.hosts.join(',');
    this.judgeCorruption(run, where);
    if (run.rows.length === 0) return;
    this.judgeCollapse(run, where);
    this.judgeBands(run, where);
    if (run.hosts.length === 2) this.judgePairs(run);
  }

  private judgeCorruption(run: Run, where: string): void {
    const key = `nccl_data_corruption|${run.test}|${where}`;
    if (run.wrong === 0 && run.outOfBounds === 0) {
      if (run.complete) this.close(key, run, `${where}: a clean ${run.test} run shows no corrupted data.`);
      return;
    }
    const sizes = [...new Set(run.rows.filter((r) => (r.wrong ?? 0) > 0).map((r) => r.bytes))];
    // One host: it is the suspect. Several: the run cannot say which one, so none is cordoned.
    const one = run.hosts.length === 1;
    this.raise(key, run, {
      type: 'nccl_data_corruption',
      severity: 'critical',
      action: one ? 'cordon' : 'watch',
      evidence: {
        test: run.test,
        hosts: run.hosts,
        wrong: run.wrong,
        out_of_bounds: run.outOfBounds,
        sizes_bytes: sizes,
      },
      summary: `${run.test} on ${where} returned wrong data (${run.wrong || run.outOfBounds} wrong values${sizes.length ? ` at ${sizes.join(', ')} bytes` : ''}): the GPUs, links or NCCL build there corrupt collectives${one ? '' : '; run it on each host and on pairs to find which'}.`,
    });
  }

  private judgeCollapse(run: Run, where: string): void {
    const key = `nccl_busbw_collapse|${run.test}|${where}`;
    const series = new Map<string, Row[]>();
    for (const r of run.rows) {
      const k = `${r.dtype}|${r.redop}|${r.in_place}`;
      const s = series.get(k) ?? [];
      series.set(k, s);
      s.push(r);
    }
    let worst: { from: Row; to: Row; ratio: number } | undefined;
    for (const s of series.values()) {
      s.sort((a, b) => a.bytes - b.bytes);
      for (let i = 1; i < s.length; i++) {
        const [a, b] = [s[i - 1], s[i]];
        if (a.bytes < this.cfg.minBytes || b.bytes <= a.bytes || a.busbw_gbs < this.cfg.collapseMinGbs)
          continue;
        const ratio = b.busbw_gbs / a.busbw_gbs;
        if (ratio < this.cfg.collapseRatio && (!worst || ratio < worst.ratio))
          worst = { from: a, to: b, ratio };
      }
    }
    if (!worst) {
      if (run.complete) this.close(key, run, `${where}: ${run.test} bandwidth grows with size again.`);
      return;
    }
    const { from, to, ratio } = worst;
    this.raise(key, run, {
      type: 'nccl_busbw_collapse',
      severity: 'warning',
      action: 'watch',
      evidence: {
        test: run.test,
        hosts: run.hosts,
        from_bytes: from.bytes,
        to_bytes: to.bytes,
        from_busbw_gbs: GB(from.busbw_gbs),
        to_busbw_gbs: GB(to.busbw_gbs),
        ratio: round(ratio, 3),
        in_place: to.in_place ?? false,
      },
      summary: `${run.test} on ${where}: bus bandwidth collapses from ${GB(from.busbw_gbs)} GB/s at ${from.bytes} bytes to ${GB(to.busbw_gbs)} GB/s at ${to.bytes} bytes (${Math.round(ratio * 100)}%).`,
    });
  }

  private judgeBands(run: Run, where: string): void {
    const low: Record<string, unknown>[] = [];
    for (const band of BANDS) {
      const rows = run.rows.filter((r) => r.bytes >= band.from && r.bytes < band.to);
      if (rows.length === 0) continue;
      const measured = Math.max(...rows.map((r) => r.busbw_gbs));
      const refKey = `${run.test}|${run.hosts.length}|${run.nranks}|${run.gpu}|${band.name}`;
      const prior = this.best.get(refKey);
      const configured = band.name === 'large' ? (run.expected ?? this.cfg.expectedGbs[run.test]) : undefined;
      if (configured !== undefined && measured < configured)
        low.push({
          band: band.name,
          measured_gbs: GB(measured),
          expected_gbs: GB(configured),
          reference: 'configured',
        });
      else if (configured === undefined && prior && measured < this.cfg.lowRatio * prior.gbs)
        low.push({
          band: band.name,
          measured_gbs: GB(measured),
          expected_gbs: GB(prior.gbs),
          reference: 'best_known',
          best_hosts: prior.hosts,
          best_ts: prior.ts,
        });
      if (!prior || measured > prior.gbs)
        this.best.set(refKey, { gbs: measured, ts: run.ts, hosts: run.hosts });
    }
    const key = `nccl_busbw_low|${run.test}|${where}`;
    if (low.length === 0) {
      if (run.complete)
        this.close(key, run, `${where}: ${run.test} reaches the expected bus bandwidth again.`);
      return;
    }
    const shown = low[low.length - 1] as { band: string; measured_gbs: number; expected_gbs: number };
    this.raise(key, run, {
      type: 'nccl_busbw_low',
      severity: 'warning',
      action: 'watch',
      evidence: { test: run.test, hosts: run.hosts, nranks: run.nranks, bands: low },
      summary: `${run.test} on ${where}: ${shown.measured_gbs} GB/s bus bandwidth in the ${shown.band} sizes, expected ${shown.expected_gbs} GB/s.`,
    });
  }

  /** Pairwise runs: a host is named when every pair through it is slow and its peers have fast pairs. */
  private judgePairs(run: Run): void {
    const band = [...BANDS]
      .reverse()
      .map((b) => run.rows.filter((r) => r.bytes >= b.from && r.bytes < b.to))
      .find((rows) => rows.length > 0);
    if (!band) return;
    const group = `${run.test}|${run.nranks}|${run.gpu}`;
    const pairs = this.pairs.get(group) ?? new Map();
    this.pairs.set(group, pairs);
    const hosts = [...run.hosts].sort() as [string, string];
    pairs.set(hosts.join(','), { hosts, gbs: Math.max(...band.map((r) => r.busbw_gbs)) });
    const best = Math.max(...[...pairs.values()].map((p) => p.gbs));
    const slow = (p: { gbs: number }) => p.gbs < this.cfg.lowRatio * best;
    const byHost = new Map<string, { slow: { peer: string; gbs: number }[]; fast: number }>();
    for (const p of pairs.values()) {
      for (const [h, peer] of [p.hosts, [p.hosts[1], p.hosts[0]]]) {
        const s = byHost.get(h) ?? { slow: [], fast: 0 };
        byHost.set(h, s);
        if (slow(p)) s.slow.push({ peer, gbs: GB(p.gbs) });
        else s.fast++;
      }
    }
    for (const [host, s] of byHost) {
      const key = `nccl_slow_host|${run.test}|${host}`;
      const named =
        s.fast === 0 &&
        s.slow.length >= this.cfg.minSlowPairs &&
        s.slow.every((x) => (byHost.get(x.peer)?.fast ?? 0) > 0);
      if (!named) {
        if (this.open.has(key) && s.fast > 0)
          this.close(key, { ...run, hosts: [host] }, `${host}: a ${run.test} pair through it is fast again.`);
        continue;
      }
      this.raise(
        key,
        { ...run, hosts: [host] },
        {
          type: 'nccl_slow_host',
          severity: 'warning',
          action: 'cordon',
          evidence: {
            test: run.test,
            nranks: run.nranks,
            slow_pairs: s.slow,
            best_pair_gbs: GB(best),
            expected_gbs: GB(best),
            measured_gbs: Math.max(...s.slow.map((x) => x.gbs)),
          },
          summary: `${host} is common to ${s.slow.length} slow ${run.test} pairs (at most ${Math.max(...s.slow.map((x) => x.gbs))} GB/s, best pair ${GB(best)} GB/s) while its peers have fast pairs: its NICs or links are the suspect.`,
        },
      );
    }
  }

  private raise(
    key: string,
    run: Run,
    draft: Pick<FindingDraft, 'type' | 'severity' | 'action' | 'evidence' | 'summary'>,
  ): void {
    const full: FindingDraft = {
      ...draft,
      host: run.hosts[0],
      ...(run.hosts.length === 2 ? { peer_host: run.hosts[1] } : {}),
      onset_ts: run.ts,
      evidence: { ...draft.evidence, complete: run.complete },
    };
    const id = this.open.get(key);
    if (id && this.log.isOpen(id)) {
      this.log.update(id, run.ts, full, true);
      return;
    }
    const fresh = findingId(draft.type, key, run.ts);
    this.open.set(key, fresh);
    this.log.openFinding(fresh, run.ts, full);
  }

  private close(key: string, run: Run, summary: string): void {
    const id = this.open.get(key);
    if (!id) return;
    this.open.delete(key);
    this.log.resolve(id, run.ts, { summary });
  }
}

/** The run's figures from a check event, or undefined when it is not an nccl-tests run. */
function toRun(e: CheckEvent): Run | undefined {
  if (e.tool !== 'nccl-tests') return undefined;
  const x = e as CheckEvent & Record<string, unknown>;
  const rows = (Array.isArray(x.rows) ? x.rows : []).filter(
    (r): r is Row =>
      typeof r === 'object' &&
      r !== null &&
      Number.isFinite((r as Row).bytes) &&
      Number.isFinite((r as Row).busbw_gbs),
  );
  const hosts = Array.isArray(x.hosts) && x.hosts.length ? x.hosts.map(String) : [e.host];
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  return {
    ts: e.ts,
    test: typeof x.test === 'string' ? x.test : 'unknown_perf',
    hosts,
    nranks: num(x.nranks) || 1,
    gpu: typeof x.gpu_name === 'string' ? x.gpu_name : '',
    rows,
    complete: x.complete !== false,
    wrong: num(x.wrong) || rows.reduce((s, r) => s + num(r.wrong), 0),
    outOfBounds: num(x.out_of_bounds),
    expected: typeof e.expected_gbs === 'number' ? e.expected_gbs : undefined,
  };
}
