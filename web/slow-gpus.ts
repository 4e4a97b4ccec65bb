/**
 * The slowest-GPUs table, for one job (its latest ranking) and for the fleet (one row per GPU, from
 * the latest job that ranked it): how much slower than its stage peers each GPU runs, and what
 * replacing it would buy. A GPU slower from the start is silicon, not a finding unless it costs its
 * job 5%: this is where operators find the others, for maintenance.
 */
import type { SlowGpu } from './api.js';
import { esc } from './format.js';

const signed = (x: number) => `${x > 0 ? '+' : ''}${x.toFixed(1)}%`;

export function slowGpuTable(el: HTMLElement, gpus: (SlowGpu & { jobs?: number })[], fleet = false): void {
  if (!gpus.length) {
    el.innerHTML = fleet
      ? '<p class="note">No ranking in the last 7 days: a job is ranked once it has run ~80 steps.</p>'
      : '<p class="note">No ranking yet: a job is ranked once it has run ~80 steps.</p>';
    return;
  }
  const head = `<tr>${fleet ? '<th>Job</th>' : ''}<th>GPU</th><th class="num">Rank</th><th class="num">Stage</th>
    <th class="num" title="its own level against its pipeline-stage peers' median">vs stage peers</th>
    <th class="num" title="share of the job's throughput replacing it would buy now (its lead over the next slowest GPU); a straggler finding's cost is what it costs the job against its stage's median">replacing buys</th>
    <th class="num">GPU-h/day</th>${fleet ? '<th class="num" title="jobs that ranked it">jobs</th>' : ''}</tr>`;
  const rows = gpus
    .map(
      (g) => `<tr data-rank="${g.rank}" data-host="${esc(g.host)}" data-gpu="${g.gpu}">
      ${fleet ? `<td><a href="#/job/${encodeURIComponent(g.job)}">${esc(g.job)}</a></td>` : ''}
      <td>${esc(g.host)} GPU ${g.gpu}</td><td class="num">${g.rank}</td><td class="num">${g.stage}</td>
      <td class="num">${signed(g.slowdown_pct)}</td><td class="num${g.cost_pct >= 1 ? ' hot' : ''}">${g.cost_pct.toFixed(2)}%</td>
      <td class="num">${g.gpu_hours_per_day.toFixed(1)}</td>${fleet ? `<td class="num">${g.jobs ?? 1}</td>` : ''}</tr>`,
    )
    .join('');
  const top = gpus[0];
  const note =
    top.cost_pct > 0
      ? `The step waits for its slowest GPU: replacing ${esc(top.host)} GPU ${top.gpu} would buy ${fleet ? 'its job' : 'the job'} ~${top.cost_pct.toFixed(1)}% of its throughput; ${fleet ? 'a GPU that costs nothing in its job is slow all the same' : 'the others cost nothing while it remains'}.`
      : 'None of these sets the pace: replacing one would buy nothing while the slowest GPU remains.';
  el.innerHTML = `<table class="slow-gpus"><thead>${head}</thead><tbody>${rows}</tbody></table><p class="note">${note}</p>`;
}
