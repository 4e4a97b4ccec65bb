/**
 * Checkpoint-interval advice from a save time δ, a mean time between failures M and a restart
 * time R (all in seconds). τ is the compute time between saves (what "save every N steps" sets:
 * N × step time); the wall time from one save to the next is τ + δ.
 *
 * - Young (1974): τ = √(2δM), first order.
 * - Daly (2006, "A higher order estimate of the optimum checkpoint interval for restart dumps",
 *   FGCS 22(3)): τ = √(2δM)·[1 + ⅓·√(δ/2M) + ⅑·(δ/2M)] − δ for δ < 2M, and τ = M otherwise.
 * - Expected efficiency (useful compute over wall time) under Daly's complete model, with Poisson
 *   failures that can also strike during saves and restarts:
 *   E(τ) = τ / (M·e^(R/M)·(e^((τ+δ)/M) − 1)).
 *
 * Asynchronous saves: only the blocking part stalls training, so δ is the blocking part; a failure
 * while the rest is still being written falls back one save further, which costs on average the
 * non-blocking part again, counted here as extra restart time.
 */

export interface CheckpointInputs {
  /** Blocking part of a save, seconds (δ). */
  saveS?: number;
  /** Whole save, seconds, when saves are asynchronous (≥ saveS). */
  saveTotalS?: number;
  /** Mean time between failures of the job at its size, seconds (M). */
  mtbfS?: number;
  /** Restart time, seconds (R): from the failure until training runs again. */
  restartS?: number;
  /** The interval in use (compute seconds between saves), when known. */
  intervalS?: number;
}

export const young = (saveS: number, mtbfS: number): number => Math.sqrt(2 * saveS * mtbfS);

export function daly(saveS: number, mtbfS: number): { intervalS: number; branch: 'higher_order' | 'mtbf' } {
  if (saveS >= 2 * mtbfS) return { intervalS: mtbfS, branch: 'mtbf' };
  const x = saveS / (2 * mtbfS);
  return {
    intervalS: Math.sqrt(2 * saveS * mtbfS) * (1 + Math.sqrt(x) / 3 + x / 9) - saveS,
    branch: 'higher_order',
  };
}

/** Expected share of wall time spent on compute that is kept, at interval τ (Daly's complete model). */
export function efficiency(intervalS: number, saveS: number, mtbfS: number, restartS = 0): number {
  if (!(intervalS > 0) || !(mtbfS > 0)) return 0;
  const d = Math.expm1((intervalS + saveS) / mtbfS);
  return intervalS / (mtbfS * Math.exp(restartS / mtbfS) * d);
}

/** The τ that maximises `efficiency`, by golden-section search (the function is unimodal in τ). */
export function optimalInterval(saveS: number, mtbfS: number, restartS = 0): number {
  let a = 1e-6 * mtbfS;
  let b = 20 * mtbfS + 10 * saveS;
  const g = (Math.sqrt(5) - 1) / 2;
  for (let i = 0; i < 200 && b - a > 1e-9 * b; i++) {
    const c = b - g * (b - a);
    const d = a + g * (b - a);
    if (efficiency(c, saveS, mtbfS, restartS) > efficiency(d, saveS, mtbfS, restartS)) b = d;
    else a = c;
  }
  return (a + b) / 2;
}

export interface Sensitivity {
  /** Failure rate multiplier: 0.5 (halved) or 2 (doubled). */
  rateFactor: number;
  mtbfS: number;
  /** Daly's interval at that failure rate. */
  intervalS: number;
  /** Efficiency at that failure rate, at its own best interval and at the interval advised now. */
  efficiencyAtOwn: number;
  efficiencyAtAdvised: number;
}

export interface CheckpointAdvice {
  ok: true;
  saveS: number;
  mtbfS: number;
  restartS: number;
  /** Extra rollback from asynchronous saves (total − blocking), counted with the restart. */
  asyncLagS: number;
  youngS: number;
  dalyS: number;
  dalyBranch: 'higher_order' | 'mtbf';
  /** What rankwatch advises: Daly's interval. */
  recommendedS: number;
  efficiencyRecommended: number;
  currentS?: number;
  efficiencyCurrent?: number;
  /** Goodput the current interval gives up against the recommended one, percent of the recommended. */
  currentLossPct?: number;
  sensitivity: Sensitivity[];
  notes: string[];
}

export interface MissingInputs {
  ok: false;
  missing: string[];
  /** What the advice would need, one sentence per missing input. */
  needs: string[];
}

/** Advice, or what is missing for it; never divides by zero. */
export function adviseCheckpoint(inp: CheckpointInputs): CheckpointAdvice | MissingInputs {
  const missing: string[] = [];
  const needs: string[] = [];
  if (!(inp.saveS !== undefined && Number.isFinite(inp.saveS) && inp.saveS > 0)) {
    missing.push('save time');
    needs.push(
      inp.saveS === 0
        ? 'a save time above 0 s: a save recorded as taking 0 s is likely a unit or clock problem'
        : 'the duration of at least one successful save (a checkpoint event with phase save, ok true)',
    );
  }
  if (!(inp.mtbfS !== undefined && Number.isFinite(inp.mtbfS) && inp.mtbfS > 0)) {
    missing.push('failure rate');
    needs.push(
      'a mean time between failures: at least one recorded interruption (job or fleet), or --mtbf-h',
    );
  }
  if (missing.length) return { ok: false, missing, needs };
  const saveS = inp.saveS!;
  const mtbfS = inp.mtbfS!;
  const notes: string[] = [];
  const asyncLagS = inp.saveTotalS !== undefined && inp.saveTotalS > saveS ? inp.saveTotalS - saveS : 0;
  if (inp.saveTotalS !== undefined && inp.saveTotalS < saveS)
    notes.push(
      `the whole save (${inp.saveTotalS} s) is shorter than its blocking part (${saveS} s): one of them is likely wrong; the blocking part is used`,
    );
  const restartS = Math.max(0, inp.restartS ?? 0) + asyncLagS;
  if (inp.restartS === undefined)
    notes.push('no restart time given: 0 s assumed (efficiencies are upper bounds)');
  const y = young(saveS, mtbfS);
  const d = daly(saveS, mtbfS);
  if (d.branch === 'mtbf')
    notes.push(
      `the save takes at least twice the MTBF (δ ≥ 2M): Daly's interval is M itself, and most time will be lost either way; make saves faster`,
    );
  const eff = (t: number, m = mtbfS) => efficiency(t, saveS, m, restartS);
  const advice: CheckpointAdvice = {
    ok: true,
    saveS,
    mtbfS,
    restartS,
    asyncLagS,
    youngS: y,
    dalyS: d.intervalS,
    dalyBranch: d.branch,
    recommendedS: d.intervalS,
    efficiencyRecommended: eff(d.intervalS),
    sensitivity: [0.5, 2].map((rateFactor) => {
      const m = mtbfS / rateFactor;
      const own = daly(saveS, m).intervalS;
      return {
        rateFactor,
        mtbfS: m,
        intervalS: own,
        efficiencyAtOwn: eff(own, m),
        efficiencyAtAdvised: eff(d.intervalS, m),
      };
    }),
    notes,
  };
  if (inp.intervalS !== undefined) {
    if (inp.intervalS > 0 && Number.isFinite(inp.intervalS)) {
      advice.currentS = inp.intervalS;
      advice.efficiencyCurrent = eff(inp.intervalS);
      advice.currentLossPct =
        advice.efficiencyRecommended > 0
          ? (100 * (advice.efficiencyRecommended - advice.efficiencyCurrent)) / advice.efficiencyRecommended
          : 0;
    } else notes.push(`the current interval (${inp.intervalS} s) is not a positive time: left out`);
  }
  return advice;
}
