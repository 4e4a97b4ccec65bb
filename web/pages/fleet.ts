/**
 * The fleet: node health worst first, the cordon list, the slowest GPUs, faults by source over
 * time, checkpoints.
 */
import type uPlot from 'uplot';
import type { AutomationBudget } from '../../schema/output.js';
import { api, type CheckpointStats, type Fault, type Finding, type NodeRow, type SlowGpu } from '../api.js';
import { type Chart, lineChart } from '../charts.js';
import { ago, esc, ms, num, time } from '../format.js';
import type { View } from '../main.js';
import { slowGpuTable } from '../slow-gpus.js';

const HOUR = 3_600_000;

const STATE_BADGE: Record<string, string> = {
  healthy: 'ok',
  suspect: 'warning',
  verifying: 'warning',
  repairing: 'critical',
  cordoned: 'critical',
};

/** GET /v1/actions, as far as the panel reads it. */
interface Actions {
  mode: 'off' | 'dry_run' | 'act' | 'approval';
  driver: string;
  breaker_tripped: boolean;
  leading?: boolean;
  budget: AutomationBudget | null;
  pending: { id: string; host: string; finding_id: string }[];
}

const MODE: Record<Actions['mode'], string> = {
  off: 'off',
  dry_run: 'dry-run',
  act: 'on',
  approval: 'on, after approval',
};

/** Mode, driver, breaker, budget used of its limit and window, pending approvals. */
function automationPanel(el: HTMLElement, a: Actions): void {
  const b = a.budget;
  const kpi = (key: string, label: string, value: string, cls = '') =>
    `<div class="kpi" data-key="${key}"><span>${label}</span><b class="${cls}">${value}</b></div>`;
  if (!b) {
    el.innerHTML = `<div class="kpis">${kpi('mode', 'mode', MODE.off)}</div>
      <p class="note">No repair loop runs in this server: it runs inside <code>rankwatch up</code> (dry-run unless <code>--cordon-driver … --cordon-enable</code> with a budget).</p>`;
    return;
  }
  const trip = b.breaker_tripped_at;
  el.innerHTML = `<div class="kpis">
      ${kpi('mode', 'mode', MODE[a.mode])}
      ${kpi('driver', 'driver', esc(a.driver))}
      ${kpi('breaker', 'breaker', trip !== null ? 'tripped' : 'closed', trip !== null ? 'bad' : '')}
      ${kpi('nodes', a.mode === 'dry_run' ? 'nodes out (on paper)' : 'nodes out', `${b.nodes_out} / ${b.nodes_limit}`)}
      ${kpi('hour', 'cordons, last hour', `${b.cordons_last_hour} / ${b.per_hour ?? '∞'}`)}
      ${kpi('pending', 'pending approvals', String(a.pending.length))}
    </div>
    <p class="muted small">Node limit from ${esc(b.limit_by)} (fleet of ${b.fleet}); the breaker trips at ${b.breaker_burst} requests in ${Math.round(b.breaker_window_s / 60)} min.${a.leading === false ? ' This server does not lead the repair loop: another process sharing the store decides.' : ''}</p>
    ${trip !== null ? `<p class="note empty">Breaker tripped ${ago(trip)} (${time(trip)}): ${esc(b.breaker_reason ?? '')}. Every cordon is refused until an admin resets it (POST /v1/breaker/reset).</p>` : ''}
    ${a.pending.length ? `<ul>${a.pending.map((p) => `<li><b>${esc(p.host)}</b> waits for approval (action <code>${esc(p.id)}</code>, finding ${esc(p.finding_id)})</li>`).join('')}</ul>` : ''}`;
}

export function fleetPage(view: View): void {
  view.main.innerHTML = `
    <section class="card"><h1>Fleet</h1><div id="nodes"><p class="note pending">Loading nodes…</p></div></section>
    <section class="card"><h2>Automation</h2><div id="automation"><p class="note pending">Loading…</p></div></section>
    <section class="card"><h2>Cordon list</h2><div id="cordon"><p class="note pending">Loading…</p></div></section>
    <section class="card"><h2>Slowest GPUs (last 7 days)</h2><div id="slow-gpus"><p class="note pending">Loading…</p></div></section>
    <section class="card"><h2>Faults by source, per hour (last 7 days)</h2><div id="fault-chart" class="chart"></div><p id="fault-note" class="note pending">Loading…</p></section>
    <section class="card"><h2>Checkpoints and failure rates</h2><div id="checkpoints"><p class="note pending">Loading…</p></div></section>`;
  const $ = (id: string) => view.main.querySelector(`#${id}`) as HTMLElement;
  let chart: Chart | undefined;
  let sources = '';

  view.poll(async () => {
    const from = Date.now() - 7 * 24 * HOUR;
    const [{ nodes }, cordon, { faults }, { checkpoints }, advice, slow, actions] = await Promise.all([
      api<{ nodes: NodeRow[] }>('/v1/nodes', { from }),
      api<{ hosts: { host: string; action: string; active_findings: number; faults: number }[] }>(
        '/v1/cordon',
      ),
      api<{ faults: Fault[] }>('/v1/faults', { from, limit: 10_000 }),
      api<{ checkpoints: CheckpointStats[] }>('/v1/checkpoints', { from }),
      api<{ findings: Finding[] }>('/v1/findings', {
        type: 'checkpoint_interval',
        status: 'open',
        limit: 50,
      }),
      api<{ gpus: SlowGpu[] }>('/v1/slow-gpus', { from, limit: 20 }).catch(() => ({ gpus: [] })),
      api<Actions>('/v1/actions', { limit: 1 }),
    ]);

    // State (what the repair loop did) and what open findings ask for, side by side, never merged.
    $('nodes').innerHTML = nodes.length
      ? `<table class="nodes"><thead><tr><th>Host</th><th>State</th><th>Findings ask</th><th class="num">Faults</th><th>Sources</th><th class="num">Throttled GPU-min</th><th class="num">ECC DBE</th><th class="num">Active findings</th></tr></thead><tbody>${nodes
          .map(
            (
              n,
            ) => `<tr data-host="${esc(n.host)}" data-state="${esc(n.state)}" data-asks="${esc(n.worst_action)}"><td>${esc(n.host)}</td>
            <td title="${esc(n.state_reason ?? '')}"><span class="badge ${STATE_BADGE[n.state] ?? 'warning'}">${esc(n.state)}</span>${n.out_by_rankwatch ? ' <span class="muted small">out by rankwatch</span>' : n.dry_run_out ? ' <span class="muted small">out on paper (dry-run)</span>' : ''}${n.needs_human ? ' <span class="muted small">needs a person</span>' : ''}</td>
            <td>${n.worst_action === 'none' ? '<span class="muted">nothing</span>' : esc(n.worst_action)}</td>
            <td class="num">${n.faults}</td><td>${esc(n.fault_sources.join(', '))}</td><td class="num">${n.throttled_gpu_minutes}</td><td class="num">${n.ecc_dbe}</td><td class="num">${n.active_findings}</td></tr>`,
          )
          .join('')}</tbody></table>
          <p class="muted small">State: what the repair loop holds the node to be. Findings ask: the strongest action its open findings request, which the loop may have refused, rehearsed (dry-run) or not reached yet.</p>`
      : '<p class="note empty">No node has reported in the last 7 days: the store holds no GPU samples, faults or findings yet.</p>';

    automationPanel($('automation'), actions);

    $('cordon').innerHTML = cordon.hosts.length
      ? `<p>Open findings ask to take these hosts out (<code>curl -H 'Accept: text/plain' …/v1/cordon | xargs -n1 kubectl cordon</code>):</p>
         <ul>${cordon.hosts.map((h) => `<li><b>${esc(h.host)}</b>: ${esc(h.action)} (${h.active_findings} findings, ${h.faults} faults)</li>`).join('')}</ul>`
      : '<p class="note">No host to cordon: no open finding asks for cordon, drain or RMA.</p>';

    slowGpuTable($('slow-gpus'), slow.gpus, true);

    const note = $('fault-note');
    note.classList.remove('pending');
    if (!faults.length) {
      $('fault-chart').hidden = true;
      note.className = 'note';
      note.textContent = 'No faults in the last 7 days.';
    } else {
      const kinds = [...new Set(faults.map((f) => f.source))].sort();
      // Every hour of the week, so a quiet hour reads as 0 and one fault is a bar, not a lone point.
      const start = Math.floor(from / HOUR) * HOUR;
      const end = Math.floor(Date.now() / HOUR) * HOUR;
      const xs: number[] = [];
      for (let t = start; t <= end; t += HOUR) xs.push(t / 1000);
      const counts = kinds.map(() => xs.map(() => 0));
      for (const f of faults) {
        const i = Math.floor((f.ts - start) / HOUR);
        if (i >= 0 && i < xs.length) counts[kinds.indexOf(f.source)][i]++;
      }
      const palette = ['--bad', '--accent', '--accent2', '--warn', '--fg'];
      // Re-create the chart when the set of sources changes (a new series).
      if (!chart || sources !== kinds.join()) {
        $('fault-chart').innerHTML = '';
        chart = lineChart(
          $('fault-chart'),
          kinds.map((k, i) => ({
            label: k,
            color: palette[i % palette.length],
            scale: 'n',
            value: (v) => num(v),
            counts: true,
          })),
          200,
        );
        sources = kinds.join();
      }
      $('fault-chart').hidden = false;
      chart.update([xs, ...counts] as uPlot.AlignedData, []);
      note.className = 'note';
      note.textContent = `${faults.length} fault${faults.length === 1 ? '' : 's'}, the latest ${ago(faults[0].ts)} on ${faults[0].host} (${faults[0].source}).`;
    }

    const adv = advice.findings;
    $('checkpoints').innerHTML = `${
      checkpoints.length
        ? `<table><thead><tr><th>Job</th><th>Phase</th><th class="num">Count</th><th class="num">Failed</th><th class="num">p50</th><th class="num">p95</th><th class="num">Max</th></tr></thead><tbody>${checkpoints
            .map(
              (
                c,
              ) => `<tr><td><a href="#/job/${encodeURIComponent(c.job)}">${esc(c.job)}</a></td><td>${esc(c.phase)}</td><td class="num">${c.count}</td>
              <td class="num">${c.failures}${c.count ? ` (${((100 * c.failures) / c.count).toFixed(0)}%)` : ''}</td><td class="num">${ms(c.p50_ms)}</td><td class="num">${ms(c.p95_ms)}</td><td class="num">${ms(c.max_ms)}</td></tr>`,
            )
            .join('')}</tbody></table>`
        : '<p class="note">No checkpoints recorded in the last 7 days.</p>'
    }
    ${adv.length ? `<h3>Checkpoint advice</h3><ul>${adv.map((f) => `<li><b>${esc(f.job ?? '')}</b>: ${esc(f.summary)}</li>`).join('')}</ul>` : ''}`;
  }, 20_000);
}
