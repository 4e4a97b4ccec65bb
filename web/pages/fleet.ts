/**
 * The fleet: node health worst first, the cordon list, the slowest GPUs, faults by source over
 * time, checkpoints.
 */
import type uPlot from 'uplot';
import { api, type CheckpointStats, type Fault, type Finding, type NodeRow, type SlowGpu } from '../api.js';
import { type Chart, lineChart } from '../charts.js';
import { ago, esc, ms, num } from '../format.js';
import type { View } from '../main.js';
import { slowGpuTable } from '../slow-gpus.js';

const HOUR = 3_600_000;

export function fleetPage(view: View): void {
  view.main.innerHTML = `
    <section class="card"><h1>Fleet</h1><div id="nodes"><p class="note pending">Loading nodes…</p></div></section>
    <section class="card"><h2>Cordon list</h2><div id="cordon"><p class="note pending">Loading…</p></div></section>
    <section class="card"><h2>Slowest GPUs (last 7 days)</h2><div id="slow-gpus"><p class="note pending">Loading…</p></div></section>
    <section class="card"><h2>Faults by source, per hour (last 7 days)</h2><div id="fault-chart" class="chart"></div><p id="fault-note" class="note pending">Loading…</p></section>
    <section class="card"><h2>Checkpoints and failure rates</h2><div id="checkpoints"><p class="note pending">Loading…</p></div></section>`;
  const $ = (id: string) => view.main.querySelector(`#${id}`) as HTMLElement;
  let chart: Chart | undefined;
  let sources = '';

  view.poll(async () => {
    const from = Date.now() - 7 * 24 * HOUR;
    const [{ nodes }, cordon, { faults }, { checkpoints }, advice, slow] = await Promise.all([
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
    ]);

    $('nodes').innerHTML = nodes.length
      ? `<table><thead><tr><th>Host</th><th>Health</th><th class="num">Faults</th><th>Sources</th><th class="num">Throttled GPU-min</th><th class="num">ECC DBE</th><th class="num">Active findings</th></tr></thead><tbody>${nodes
          .map(
            (
              n,
            ) => `<tr><td>${esc(n.host)}</td><td><span class="badge ${n.worst_action === 'none' ? 'ok' : n.worst_action === 'watch' ? 'warning' : 'critical'}">${n.worst_action === 'none' ? 'healthy' : esc(n.worst_action)}</span></td>
            <td class="num">${n.faults}</td><td>${esc(n.fault_sources.join(', '))}</td><td class="num">${n.throttled_gpu_minutes}</td><td class="num">${n.ecc_dbe}</td><td class="num">${n.active_findings}</td></tr>`,
          )
          .join('')}</tbody></table>`
      : '<p class="note empty">No node has reported in the last 7 days: the store holds no GPU samples, faults or findings yet.</p>';

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
