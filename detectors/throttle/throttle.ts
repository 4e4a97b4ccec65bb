/**
 * Throttle detection from GPU telemetry: the SM clock well below the GPU's maximum while the GPU
 * is busy, with a reason bit that means a fault (HW slowdown, SW/HW thermal, HW power brake),
 * sustained: a leaky counter must climb to `fireScore`, so lone samples never fire. Idle GPUs
 * (reason 0x1 or low utilisation) are ignored; SW power cap (0x4) alone is normal under load.
 * When most GPUs of a host throttle together, that is one host-level finding, not eight.
 */
import { round } from '../../core/round.js';
import type { GpuEvent } from '../../schema/events.js';
import type { Action } from '../../schema/finding.js';
import { type FindingLog, findingId } from '../findings.js';
import { GpuTable } from './gpus.js';
import { FAULT_REASONS, REASONS, reasonNames } from './reasons.js';

export interface ThrottleConfig {
  /** A sample counts when its clock is below this share of the maximum. */
  clockFraction: number;
  /** Utilisation below this is idle, whatever the clock. */
  busyUtilPct: number;
  /** Net bad samples (leaky count) that open a finding. */
  fireScore: number;
  maxScore: number;
  /** Consecutive clean samples that resolve it. */
  resolveCleanSamples: number;
  /** Share of a host's GPUs throttling together that makes one host-level finding. */
  hostWideShare: number;
  /** Event time to wait for the host's other GPUs before deciding GPU- or host-level. */
  groupWaitMs: number;
  /**
   * A GPU at its power cap that draws at least this share less than its job's median is held back
   * by a lower power limit; one drawing as much as its peers is a slower bin of silicon.
   */
  lowerLimitShare: number;
}

export const THROTTLE_DEFAULTS: ThrottleConfig = {
  clockFraction: 0.9,
  busyUtilPct: 50,
  fireScore: 5,
  maxScore: 20,
  resolveCleanSamples: 30,
  hostWideShare: 0.75,
  groupWaitMs: 2_000,
  lowerLimitShare: 0.05,
};

interface HostState {
  /** The host's name, one string its GPU states share (not one parsed copy per GPU). */
  name: string;
  gpus: Set<number>;
  /** The host's GPUs' ids in the table, by GPU index: found per sample without building a `host/gpu` key. */
  byGpu: number[];
  pendingSince?: number;
  hostIncident?: string;
}

export class ThrottleDetector {
  /** GPU states by host, then GPU index: no `host/gpu` string key per GPU. */
  private readonly hosts = new Map<string, HostState>();
  /** Job ids, one string per job shared by its GPUs' states. */
  private readonly jobNames = new Map<string, string>();
  private readonly incidents = new Map<string, { host: string; gpus: number[] }>();
  private readonly t = new GpuTable();

  constructor(
    private readonly log: FindingLog,
    /** Maximum SM clock for a job's GPU model, when samples do not carry it. */
    private readonly maxClockOf: (job: string | undefined) => number | undefined,
    private readonly cfg: ThrottleConfig = THROTTLE_DEFAULTS,
  ) {}

  process(e: GpuEvent, job: string | undefined, rank: number | undefined): void {
    let host = this.hosts.get(e.host);
    if (!host) {
      host = { name: e.host, gpus: new Set<number>(), byGpu: [] };
      this.hosts.set(e.host, host);
    }
    const t = this.t;
    let g = host.byGpu[e.gpu];
    if (g === undefined) {
      g = t.add(host.name, e.gpu, e.ts);
      host.byGpu[e.gpu] = g;
      host.gpus.add(e.gpu);
    }
    if (e.ts <= t.lastTs[g]) return; // duplicate or out of order: telemetry is a rate, not a ledger
    t.lastTs[g] = e.ts;
    if (job !== undefined && job !== t.job[g]) t.job[g] = this.jobName(job);
    if (rank !== undefined) t.rank[g] = rank;
    const max = e.max_sm_clock_mhz ?? this.maxClockOf(t.job[g]) ?? Math.max(t.maxClock[g], e.sm_clock_mhz);
    t.maxClock[g] = max;
    const idle = (e.throttle_reasons & REASONS.gpu_idle) !== 0 || (e.util_pct ?? 100) < this.cfg.busyUtilPct;
    const bad =
      !idle && e.sm_clock_mhz < this.cfg.clockFraction * max && (e.throttle_reasons & FAULT_REASONS) !== 0;
    if (!idle) t.powerCap[g] += 0.05 * ((e.throttle_reasons & REASONS.sw_power_cap ? 1 : 0) - t.powerCap[g]);
    if (!idle && e.power_w !== undefined && e.power_w > 0)
      t.power[g] = t.power[g] === 0 ? e.power_w : t.power[g] + 0.05 * (e.power_w - t.power[g]);

    if (bad) {
      if (t.score[g] === 0) t.runStartTs[g] = e.ts;
      t.score[g] = Math.min(this.cfg.maxScore, t.score[g] + 1);
      t.clean[g] = 0;
      t.badSamples[g]++;
      t.clockSum[g] += e.sm_clock_mhz;
      t.reasons[g] |= e.throttle_reasons & FAULT_REASONS;
    } else {
      t.score[g] = Math.max(0, t.score[g] - 1);
      if (t.score[g] === 0) t.clean[g]++;
      if (!t.firing[g] && t.score[g] === 0) {
        t.badSamples[g] = 0;
        t.clockSum[g] = 0;
        t.reasons[g] = 0;
      }
    }

    if (!t.firing[g] && t.score[g] >= this.cfg.fireScore) {
      t.firing[g] = 1;
      if (host.hostIncident) this.attach(host.hostIncident, g);
      else host.pendingSince ??= e.ts;
    }
    if (host.pendingSince !== undefined && e.ts >= host.pendingSince + this.cfg.groupWaitMs)
      this.decide(e.host, host, e.ts);
    if (t.firing[g] && t.clean[g] >= this.cfg.resolveCleanSamples) this.clear(g, e.ts);
    const incident = t.incident[g];
    if (incident && t.firing[g] && t.badSamples[g] % 30 === 0) this.refresh(incident, e.ts);
  }

  private jobName(job: string): string {
    let name = this.jobNames.get(job);
    if (name === undefined) {
      if (this.jobNames.size >= 10_000) this.jobNames.clear(); // bounded: a fleet's running jobs
      name = job;
      this.jobNames.set(job, name);
    }
    return name;
  }

  /** The GPU's id in the table, if it has reported. */
  private gpuId(host: string, gpu: number): number | undefined {
    return this.hosts.get(host)?.byGpu[gpu];
  }

  /** Closes pending decisions at the end of input. */
  flush(ts: number): void {
    for (const [name, h] of this.hosts) if (h.pendingSince !== undefined) this.decide(name, h, ts);
  }

  /** Open throttle finding id covering this GPU, if any. */
  incidentFor(host: string, gpu: number): string | undefined {
    const g = this.gpuId(host, gpu);
    return g === undefined ? undefined : this.t.incident[g];
  }

  /**
   * SW power cap alone is no fault, unless this GPU alone of its job sits at the cap, is slow (a
   * straggler finding names it: this is called then), and draws less power than its peers: its
   * power limit is set lower than theirs. A GPU at the cap drawing what its peers draw is a slower
   * bin of silicon (same-SKU GPUs reach the same limit at different clocks), not a setting to fix:
   * it belongs in the job's slowest-GPUs ranking, not in a throttle finding. Without power readings
   * the two cannot be told apart, and nothing is said. Opens a linked throttle finding.
   */
  explainByPowerCap(host: string, gpu: number, ts: number, stragglerId: string): string | undefined {
    const t = this.t;
    const g = this.gpuId(host, gpu);
    if (g === undefined || t.incident[g] || t.powerCap[g] < 0.5 || t.power[g] === 0) return undefined;
    const job = t.job[g];
    const peers: number[] = [];
    const draws: number[] = [];
    for (let p = 0; p < t.size; p++) {
      if (t.job[p] !== job || p === g) continue;
      peers.push(t.powerCap[p]);
      if (t.power[p] > 0) draws.push(t.power[p]);
    }
    peers.sort((a, b) => a - b);
    draws.sort((a, b) => a - b);
    const peerMedian = peers.length ? peers[peers.length >> 1] : 0;
    if (peerMedian > 0.25 || draws.length === 0) return undefined;
    const peerPower = draws[draws.length >> 1];
    if (t.power[g] > (1 - this.cfg.lowerLimitShare) * peerPower) return undefined;
    const id = findingId('throttle', job, host, gpu, 'power_cap', ts);
    t.incident[g] = id;
    this.incidents.set(id, { host, gpus: [g] });
    this.log.openFinding(id, ts, {
      type: 'throttle',
      job,
      host,
      gpu,
      rank: t.rankOf(g),
      severity: 'warning',
      onset_ts: ts,
      action: 'watch',
      related: [stragglerId],
      evidence: {
        reasons: ['sw_power_cap'],
        power_cap_share: round(t.powerCap[g], 2),
        peer_power_cap_share: round(peerMedian, 2),
        power_w: Math.round(t.power[g]),
        peer_median_power_w: Math.round(peerPower),
      },
      summary:
        `${host}/${gpu} alone of its job sits at its software power cap, draws ${Math.round(t.power[g])} W ` +
        `against its peers' ${Math.round(peerPower)} W and runs slow: check its power limit.`,
    });
    return id;
  }

  private decide(hostName: string, host: HostState, ts: number): void {
    const t = this.t;
    host.pendingSince = undefined;
    const firing = [...host.gpus].map((i) => host.byGpu[i]).filter((g) => t.firing[g] && !t.incident[g]);
    if (firing.length === 0) return;
    const hostWide = firing.length >= Math.max(2, Math.ceil(this.cfg.hostWideShare * host.gpus.size));
    if (hostWide) {
      const id = findingId(
        'throttle',
        t.job[firing[0]],
        hostName,
        undefined,
        Math.min(...firing.map((g) => t.runStartTs[g])),
      );
      host.hostIncident = id;
      this.incidents.set(id, { host: hostName, gpus: [] });
      for (const g of firing) this.attach(id, g);
      this.log.openFinding(id, ts, this.draft(id));
    } else {
      for (const g of firing) {
        const id = findingId('throttle', t.job[g], hostName, t.gpu[g], t.runStartTs[g]);
        this.incidents.set(id, { host: hostName, gpus: [] });
        this.attach(id, g);
        this.log.openFinding(id, ts, this.draft(id));
      }
    }
  }

  private attach(id: string, g: number): void {
    this.t.incident[g] = id;
    const inc = this.incidents.get(id)!;
    if (!inc.gpus.includes(g)) inc.gpus.push(g);
  }

  private draft(id: string) {
    const t = this.t;
    const inc = this.incidents.get(id)!;
    const gs = inc.gpus;
    const single = gs.length === 1;
    const g0 = gs[0];
    const rank0 = t.rankOf(g0);
    const reasons = gs.reduce((m, g) => m | t.reasons[g], 0);
    const avgClock = gs.reduce((s, g) => s + t.clockSum[g] / Math.max(1, t.badSamples[g]), 0) / gs.length;
    const maxClock = t.maxClock[g0];
    const dropPct = 100 * (1 - avgClock / maxClock);
    const action: Action =
      reasons & REASONS.hw_power_brake_slowdown
        ? 'drain'
        : reasons & (REASONS.hw_thermal_slowdown | REASONS.hw_slowdown)
          ? 'cordon'
          : 'watch';
    const names = reasonNames(reasons);
    const where = single
      ? `${inc.host}/${t.gpu[g0]}${rank0 !== undefined ? ` (rank ${rank0})` : ''}`
      : `all ${gs.length} GPUs of ${inc.host}`;
    return {
      type: 'throttle',
      job: t.job[g0],
      host: inc.host,
      gpu: single ? t.gpu[g0] : undefined,
      rank: single ? rank0 : undefined,
      severity: action === 'watch' ? ('warning' as const) : ('critical' as const),
      onset_ts: Math.min(...gs.map((g) => t.runStartTs[g])),
      action,
      evidence: {
        reasons: names,
        reasons_mask: reasons,
        sm_clock_mhz: Math.round(avgClock),
        max_sm_clock_mhz: maxClock,
        clock_drop_pct: round(dropPct, 1),
        throttled_samples: Math.max(...gs.map((g) => t.badSamples[g])),
        gpus: gs.map((g) => t.gpu[g]).sort((a, b) => a - b),
      },
      summary: `${where} throttled to ${Math.round(avgClock)} of ${maxClock} MHz (${names.join(', ')}).`,
    };
  }

  private refresh(id: string, ts: number): void {
    if (this.incidents.has(id)) this.log.update(id, ts, this.draft(id));
  }

  private clear(g: number, ts: number): void {
    const t = this.t;
    t.firing[g] = 0;
    t.badSamples[g] = 0;
    t.clockSum[g] = 0;
    t.reasons[g] = 0;
    const id = t.incident[g];
    t.incident[g] = undefined;
    if (!id) return;
    const inc = this.incidents.get(id);
    if (!inc) return;
    inc.gpus = inc.gpus.filter((x) => x !== g);
    if (inc.gpus.length === 0) {
      this.incidents.delete(id);
      const host = this.hosts.get(t.host[g]);
      if (host?.hostIncident === id) host.hostIncident = undefined;
      this.log.resolve(id, ts, { summary: `${t.host[g]}: clocks back to normal.` });
    }
  }
}
