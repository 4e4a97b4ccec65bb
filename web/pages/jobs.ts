/** Jobs: running first, with an MFU sparkline, status and open findings with their cost. */
import { costliest, costText } from '../../core/figures.js';
import { api, type Finding, type JobRow, type MfuPoint } from '../api.js';
import { sparkline } from '../charts.js';
import { ago, bucketFor, esc, pct } from '../format.js';
import type { View } from '../main.js';
import { hasMfu, noMfuReason } from './why.js';

const SPARKS = 40;

export function jobsPage(view: View): void {
  view.main.innerHTML = `
    <section class="card"><h1>Jobs</h1><div id="jobs"><p class="note pending">Loading jobs…</p></div></section>`;
  const box = view.main.querySelector('#jobs') as HTMLElement;
  view.poll(async () => {
    const [{ jobs }, { findings }] = await Promise.all([
      api<{ jobs: JobRow[] }>('/v1/jobs', { limit: 200 }),
      api<{ findings: Finding[] }>('/v1/findings', { status: 'open', limit: 1000 }),
    ]);
    if (!jobs.length) {
      box.innerHTML = `<p class="note empty">The store has no jobs with steps in the last day. Send events to
        <code>POST /v1/ingest</code> (collectors, or <code>rankwatch sim | curl --data-binary @- …</code>) and they appear here.</p>`;
      return;
    }
    const open = new Map<string, Finding[]>();
    for (const f of findings) if (f.job) open.set(f.job, [...(open.get(f.job) ?? []), f]);
    const sparks = await Promise.all(
      jobs.slice(0, SPARKS).map((j) =>
        !hasMfu(j)
          ? Promise.resolve([])
          : api<{ points: MfuPoint[] }>(`/v1/jobs/${encodeURIComponent(j.job)}/mfu`, {
              from: j.first_ts,
              to: j.last_ts + 1,
              step: bucketFor(j.last_ts - j.first_ts, 60),
            }).then((r) => r.points.map((p) => p.mfu)),
      ),
    );
    box.innerHTML = `<table class="jobs">
      <thead><tr><th>Job</th><th>Status</th><th>GPUs</th><th>Last step</th><th class="num">MFU now</th><th>MFU</th><th>Open findings</th></tr></thead>
      <tbody>${jobs
        .map((j, i) => {
          const fs = (open.get(j.job) ?? []).sort(costliest);
          const cost = fs[0]?.est_cost_pct ?? 0;
          return `<tr data-job="${esc(j.job)}">
            <td><a href="#/job/${encodeURIComponent(j.job)}">${esc(j.job)}</a></td>
            <td><span class="badge ${j.status}">${j.status}</span> <span class="muted">${ago(j.last_ts)}</span></td>
            <td>${j.ranks}${j.world_size && j.world_size !== j.ranks ? ` of ${j.world_size}` : ''} × ${esc(j.gpu_model || '?')}</td>
            <td class="num">${j.last_step}</td>
            <td class="num">${!hasMfu(j) ? `<span class="muted" title="${esc(noMfuReason(j))}">none ⓘ</span>` : pct(j.mfu_now)}</td>
            <td>${i < SPARKS && sparks[i].length > 1 ? `<canvas class="spark" data-i="${i}"></canvas>` : !hasMfu(j) ? `<span class="muted small">${esc(noMfuReason(j))}</span>` : ''}</td>
            <td>${
              fs.length
                ? `<span class="badge ${fs.some((f) => f.severity === 'critical') ? 'critical' : 'warning'}">${fs.length}</span>
                   <span class="muted small">costliest: ${esc(fs[0].type)} on ${esc(fs[0].host)}${cost > 0 ? `, ~${costText(cost)} of throughput` : ''}</span>`
                : j.open_findings
                  ? String(j.open_findings)
                  : '<span class="muted">none</span>'
            }</td></tr>`;
        })
        .join('')}</tbody></table>`;
    for (const c of box.querySelectorAll<HTMLCanvasElement>('canvas.spark'))
      sparkline(c, sparks[Number(c.dataset.i)]);
  }, 15_000);
}
