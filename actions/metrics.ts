/**
 * The repair loop's series on /metrics: decisions by verb and outcome, nodes out by who and the
 * finding type that took them out, nodes per health state, the breaker, the budget, leadership.
 */
import type { Metrics } from '../core/metrics.js';
import type { RepairLoop } from './leader.js';

export function repairLoopMetrics(metrics: Metrics, loop: RepairLoop): Metrics {
  const a = loop.automation;
  return metrics
    .labeled(
      'counter',
      'rankwatch_actions_decisions',
      'repair loop decisions since start, by verb and outcome',
      ['verb', 'outcome'],
      () => a.decisionCounts().map((d) => ({ labels: { verb: d.verb, outcome: d.outcome }, value: d.n })),
    )
    .labeled(
      'gauge',
      'rankwatch_actions_nodes_out',
      'nodes out now: by rankwatch in the scheduler, or on paper in dry-run; reason is the finding type that took them out',
      ['by', 'reason'],
      () => a.nodesOutByReason().map((n) => ({ labels: { by: n.by, reason: n.reason }, value: n.n })),
    )
    .labeled(
      'gauge',
      'rankwatch_actions_nodes',
      'hosts per health state (healthy ones not counted)',
      ['state'],
      () => Object.entries(a.nodesByState()).map(([state, value]) => ({ labels: { state }, value })),
    )
    .gauges(
      'rankwatch_actions',
      {
        breaker_tripped:
          'the cordon breaker is tripped (1): every cordon is refused until an admin resets it',
        budget_nodes: 'nodes the fleet budget lets be out at once now',
        cordons_last_hour: 'cordons counted against the hourly limit',
        pending_approvals: 'cordons waiting for a person',
        leader: 'this process leads the repair loop (1) or stands by (0)',
      },
      () => {
        const s = a.stats();
        return {
          breaker_tripped: s.breaker_tripped ? 1 : 0,
          budget_nodes: Number(s.budget_nodes),
          cordons_last_hour: Number(s.cordons_last_hour),
          pending_approvals: Number(s.pending_approvals),
          leader: loop.leading ? 1 : 0,
        };
      },
    );
}
