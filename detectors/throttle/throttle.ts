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
}

export const THROTTLE_DEFAULTS: ThrottleConfig = {
  clockFraction: 0.9,
  busyUtilPct: 50,
  fireScore: 5,
  maxScore: 20,
  resolveCleanSamples: 30,
  hostWideShare: 0.75,
  groupWaitMs: 2_000,
};

interface GpuState {
  host: string;
  gpu: number;
  job?: string;
  rank?: number;
  lastTs: number;
  score: number;
  runStartTs: number;
  firing: boolean;
  clean: number;
  badSamples: number;
  clockSum: number;
  maxClock: number;
  reasons: number;
  powerCap: number;
  incident?: string;
}

interface HostState {
  /** The host's name, one string its GPU states share (not one parsed copy per GPU). */
  name: string;
  gpus: Set<number>;
  /** The host's GPU states by index: found per sample without building a `host/gpu` key. */
  byGpu: GpuState[];
  pendingSince?: number;
  hostIncident?: string;
}

export class ThrottleDetector {
  /** GPU states by host, then GPU index: no `host/gpu` string key per GPU. */
  private readonly hosts = new Map<string, HostState>();
  /** Job ids, one string per job shared by its GPUs' states. */
  private readonly jobNames = new Map<string, string>();
  private readonly incidents = new Map<string, { host: string; gpus: GpuState[] }>();

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
    let g = host.byGpu[e.gpu];
    if (!g) {
      g = {
        host: host.name,
        gpu: e.gpu,
        lastTs: -1,
        score: 0,
        runStartTs: e.ts,
        firing: false,
        clean: 0,
        badSamples: 0,
        clockSum: 0,
        maxClock: 0,
        reasons: 0,
        powerCap: 0,
      };
      host.byGpu[e.gpu] = g;
      host.gpus.add(e.gpu);
    }
    if (e.ts <= g.lastTs) return; // duplicate or out of order: telemetry is a rate, not a ledger
    g.lastTs = e.ts;
    if (job !== undefined && job !== g.job) g.job = this.jobName(job);
    g.rank = rank ?? g.rank;
    const max = e.max_sm_clock_mhz ?? this.maxClockOf(g.job) ?? Math.max(g.maxClock, e.sm_clock_mhz);
    g.maxClock = max;
    const idle = (e.throttle_reasons & REASONS.gpu_idle) !== 0 || (e.util_pct ?? 100) < this.cfg.busyUtilPct;
    const bad =
      !idle && e.sm_clock_mhz < this.cfg.clockFraction * max && (e.throttle_reasons & FAULT_REASONS) !== 0;
    if (!idle) g.powerCap += 0.05 * ((e.throttle_reasons & REASONS.sw_power_cap ? 1 : 0) - g.powerCap);

    if (bad) {
      if (g.score === 0) g.runStartTs = e.ts;
      g.score = Math.min(this.cfg.maxScore, g.score + 1);
      g.clean = 0;
      g.badSamples++;
      g.clockSum += e.sm_clock_mhz;
      g.reasons |= e.throttle_reasons & FAULT_REASONS;
    } else {
      g.score = Math.max(0, g.score - 1);
      if (g.score === 0) g.clean++;
      if (!g.firing && g.score === 0) {
        g.badSamples = 0;
        g.clockSum = 0;
        g.reasons = 0;
      }
    }

    if (!g.firing && g.score >= this.cfg.fireScore) {
      g.firing = true;
      if (host.hostIncident) this.attach(host.hostIncident, g);
      else host.pendingSince ??= e.ts;
    }
    if (host.pendingSince !== undefined && e.ts >= host.pendingSince + this.cfg.groupWaitMs)
      this.decide(e.host, host, e.ts);
    if (g.firing && g.clean >= this.cfg.resolveCleanSamples) this.clear(g, e.ts);
    if (g.incident && g.firing && g.badSamples % 30 === 0) this.refresh(g.incident, e.ts);
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

  private gpuState(host: string, gpu: number): GpuState | undefined {
    return this.hosts.get(host)?.byGpu[gpu];
  }

  /** Closes pending decisions at the end of input. */
  flush(ts: number): void {
    for (const [name, h] of this.hosts) if (h.pendingSince !== undefined) this.decide(name, h, ts);
  }

  /** Open throttle finding id covering this GPU, if any. */
  incidentFor(host: string, gpu: number): string | undefined {
    return this.gpuState(host, gpu)?.incident;
  }

  /**
   * SW power cap alone is no fault, unless this GPU alone of its job sits at the cap and is slow:
   * called when a straggler is found on it. Opens a linked throttle finding in that case.
   */
  explainByPowerCap(host: string, gpu: number, ts: number, stragglerId: string): string | undefined {
    const g = this.gpuState(host, gpu);
    if (!g || g.incident || g.powerCap < 0.5) return undefined;
    const peers: number[] = [];
    for (const h of this.hosts.values())
      for (const p of h.byGpu) if (p && p.job === g.job && p !== g) peers.push(p.powerCap);
    peers.sort((a, b) => a - b);
    const peerMedian = peers.length ? peers[peers.length >> 1] : 0;
    if (peerMedian > 0.25) return undefined;
    const id = findingId('throttle', g.job, host, gpu, 'power_cap', ts);
    g.incident = id;
    this.incidents.set(id, { host, gpus: [g] });
    this.log.openFinding(id, ts, {
      type: 'throttle',
      job: g.job,
      host,
      gpu,
      rank: g.rank,
      severity: 'warning',
      onset_ts: ts,
      action: 'watch',
      related: [stragglerId],
      evidence: {
        reasons: ['sw_power_cap'],
        power_cap_share: round(g.powerCap, 2),
        peer_power_cap_share: round(peerMedian, 2),
      },
      summary: `${host}/${gpu} alone of its job sits at its software power cap and runs slow: check its power limit.`,
    });
    return id;
  }

  private decide(hostName: string, host: HostState, ts: number): void {
    host.pendingSince = undefined;
    const firing = [...host.gpus].map((i) => host.byGpu[i]).filter((g) => g.firing && !g.incident);
    if (firing.length === 0) return;
    const hostWide = firing.length >= Math.max(2, Math.ceil(this.cfg.hostWideShare * host.gpus.size));
    if (hostWide) {
      const id = findingId(
        'throttle',
        firing[0].job,
        hostName,
        undefined,
        Math.min(...firing.map((g) => g.runStartTs)),
      );
      host.hostIncident = id;
      this.incidents.set(id, { host: hostName, gpus: [] });
      for (const g of firing) this.attach(id, g);
      this.log.openFinding(id, ts, this.draft(id));
    } else {
      for (const g of firing) {
        const id = findingId('throttle', g.job, hostName, g.gpu, g.runStartTs);
        this.incidents.set(id, { host: hostName, gpus: [] });
        this.attach(id, g);
        this.log.openFinding(id, ts, this.draft(id));
      }
    }
  }

  private attach(id: string, g: GpuState): void {
    g.incident = id;
    const inc = this.incidents.get(id)!;
    if (!inc.gpus.includes(g)) inc.gpus.push(g);
  }

  private draft(id: string) {
    const inc = this.incidents.get(id)!;
    const gs = inc.gpus;
    const single = gs.length === 1;
    const g0 = gs[0];
    const reasons = gs.reduce((m, g) => m | g.reasons, 0);
    const avgClock = gs.reduce((s, g) => s + g.clockSum / Math.max(1, g.badSamples), 0) / gs.length;
    const maxClock = g0.maxClock;
    const dropPct = 100 * (1 - avgClock / maxClock);
    const action: Action =
      reasons & REASONS.hw_power_brake_slowdown
        ? 'drain'
        : reasons & (REASONS.hw_thermal_slowdown | REASONS.hw_slowdown)
          ? 'cordon'
          : 'watch';
    const names = reasonNames(reasons);
    const where = single
      ? `${inc.host}/${g0.gpu}${g0.rank !== undefined ? ` (rank ${g0.rank})` : ''}`
      : `all ${gs.length} GPUs of ${inc.host}`;
    return {
      type: 'throttle',
      job: g0.job,
      host: inc.host,
      gpu: single ? g0.gpu : undefined,
      rank: single ? g0.rank : undefined,
      severity: action === 'watch' ? ('warning' as const) : ('critical' as const),
      onset_ts: Math.min(...gs.map((g) => g.runStartTs)),
      action,
      evidence: {
        reasons: names,
        reasons_mask: reasons,
        sm_clock_mhz: Math.round(avgClock),
        max_sm_clock_mhz: maxClock,
        clock_drop_pct: round(dropPct, 1),
        throttled_samples: Math.max(...gs.map((g) => g.badSamples)),
        gpus: gs.map((g) => g.gpu).sort((a, b) => a - b),
      },
      summary: `${where} throttled to ${Math.round(avgClock)} of ${maxClock} MHz (${names.join(', ')}).`,
    };
  }

  private refresh(id: string, ts: number): void {
    if (this.incidents.has(id)) this.log.update(id, ts, this.draft(id));
  }

  private clear(g: GpuState, ts: number): void {
    g.firing = false;
    g.badSamples = 0;
    g.clockSum = 0;
    g.reasons = 0;
    const id = g.incident;
    g.incident = undefined;
    if (!id) return;
    const inc = this.incidents.get(id);
    if (!inc) return;
    inc.gpus = inc.gpus.filter((x) => x !== g);
    if (inc.gpus.length === 0) {
      this.incidents.delete(id);
      const host = this.hosts.get(g.host);
      if (host?.hostIncident === id) host.hostIncident = undefined;
      this.log.resolve(id, ts, { summary: `${g.host}: clocks back to normal.` });
    }
  }
}
