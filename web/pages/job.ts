/**
 * One job: MFU and tokens/s over time with faults, findings, checkpoint saves and interruptions
 * marked, step time, the rank heatmap, its slowest GPUs, links, and findings newest first with
 * their evidence and cost. Polls every 10 s.
 */
import type uPlot from 'uplot';
import { costText, mfuText } from '../../core/figures.js';
import {
  ApiError,
  api,
  type Cell,
  type CheckpointStats,
  type Fault,
  type Finding,
  type JobSummary,
  type MfuPoint,
  type SlowGpu,
  type StepPoint,
  type Timeline,
} from '../api.js';
import { type Chart, lineChart, type Marker } from '../charts.js';
import { ago, bucketFor, esc, ms, msTick, num, pct, short, time } from '../format.js';
import { drawHeatmap } from '../heatmap.js';
import type { View } from '../main.js';
import { slowGpuTable } from '../slow-gpus.js';
import { hasMfu, noMfuReason } from './why.js';

const LINK_TYPES = new Set(['slow_link', 'nccl_busbw_low', 'nccl_busbw_collapse', 'nccl_slow_host']);

export function jobPage(view: View, job: string): void {
  const path = `/v1/jobs/${encodeURIComponent(job)}`;
  view.main.innerHTML = `
    <section class="card" id="summary"><h1>${esc(job)}</h1><p class="note pending">Loading the job…</p></section>
    <section class="card"><h2>MFU and tokens/s</h2><div id="mfu-chart" class="chart"></div><p id="mfu-note" class="note pending">Loading…</p></section>
    <section class="card"><h2>Step time</h2><div id="step-chart" class="chart"></div><p id="step-note" class="note pending">Loading…</p></section>
    <section class="card"><h2>Ranks: compute vs stage peers</h2>
      <p class="legend"><span class="swatch fast"></span> faster <span class="swatch calm"></span> typical <span class="swatch hot"></span> 20%+ slower than the rank's pipeline-stage peers, per minute</p>
      <div class="heat"><canvas id="heatmap"></canvas></div><p id="heat-note" class="note pending">Loading…</p></section>
    <section class="card"><h2>Slowest GPUs</h2><div id="slow-gpus"><p class="note pending">Loading…</p></div></section>
    <section class="card"><h2>Links</h2><div id="links"><p class="note pending">Loading…</p></div></section>
    <section class="card"><h2>Findings</h2><div id="findings"><p class="note pending">Loading…</p></div></section>`;
  const $ = (id: string) => view.main.querySelector(`#${id}`) as HTMLElement;
  let mfuChart: Chart | undefined;
  let stepChart: Chart | undefined;

  view.poll(async () => {
    const s = await api<JobSummary>(path);
    const span = Math.max(60_000, s.last_ts - s.first_ts);
    const range = { from: s.first_ts, to: s.last_ts + 1, step: bucketFor(span) };
    // The heatmap's last 6 hours at most, in about 60k cells (a 4096-rank job gets 14 columns, a
    // 100k-rank one a single column: the API refuses replies past 200,000 cells).
    const heatFrom = Math.max(s.first_ts, s.last_ts - 6 * 3_600_000);
    const columns = Math.min(150, Math.max(1, Math.floor(60_000 / Math.max(1, s.ranks))));
    const heatMinutes = Math.max(1, Math.ceil((s.last_ts - heatFrom) / 60_000 / columns));
    const [mfu, steps, heat, fs, faults, cps, tl, slow] = await Promise.all([
      api<{ points: MfuPoint[] }>(`${path}/mfu`, range),
      api<{ points: StepPoint[] }>(`${path}/steps`, range),
      api<{ cells: Cell[]; refused?: string }>(`${path}/heatmap`, {
        from: heatFrom,
        to: s.last_ts + 1,
        step: `${heatMinutes}m`,
      }).catch((err: Error) => {
        // Only the API's "too many rows" (400) is the heatmap's own note; a store that is down or a
        // token refused fails the page with the message every panel would show.
        if (err instanceof ApiError && err.status === 400)
          return { cells: [] as Cell[], refused: err.message };
        throw err;
      }),
      api<{ findings: Finding[] }>('/v1/findings', { job, limit: 500 }),
      api<{ faults: Fault[] }>('/v1/faults', { job, limit: 1000 }),
      api<{ checkpoints: CheckpointStats[] }>('/v1/checkpoints', { job }).catch(() => ({ checkpoints: [] })),
      api<Timeline>(`${path}/timeline`).catch(
        () => ({ saves: [], interruptions: [], notes: [] }) as Timeline,
      ),
      api<{ gpus: SlowGpu[] }>(`${path}/slow-gpus`).catch(() => ({ gpus: [] })),
    ]);
    summary($('summary'), s);

    const markers: Marker[] = [
      ...faults.faults.map((f) => ({ ts: f.ts, label: `${f.source} ${f.host}`, color: '--bad' })),
      ...fs.findings
        .filter((f) => f.state === 'open' || f.onset_ts)
        .map((f) => ({
          ts: f.onset_ts ?? f.ts,
          label: `${f.type} ${f.rank !== undefined ? `r${f.rank}` : f.host}`,
          color: '--warn',
        })),
    ];
    // Saves and interruptions go on the MFU chart only; the data attribute lists them for tests and tools.
    const lots = tl.saves.length > 30;
    const timeMarks: (Marker & { kind: string })[] = [
      ...tl.saves.map((c) => ({
        kind: 'save',
        ts: c.ts,
        label: lots ? '' : `${c.ok ? 'save' : 'save failed'} s${c.step}`,
        color: c.ok ? '--ok' : '--bad',
      })),
      ...tl.interruptions.flatMap((i) => [
        { kind: 'interruption', ts: i.ts, label: `interrupted: ${i.cause}`, color: '--mark' },
        ...(i.restart_ts === null
          ? []
          : [{ kind: 'restart', ts: i.restart_ts, label: 'restart', color: '--mark' }]),
      ]),
    ];
    $('mfu-chart').dataset.marks = JSON.stringify(
      timeMarks.map(({ kind, ts, label }) => ({ kind, ts, label })),
    );
    const mfuNote = $('mfu-note');
    mfuNote.classList.remove('pending');
    if (!mfu.points.length) {
      $('mfu-chart').hidden = true;
      mfuNote.className = 'note empty';
      mfuNote.textContent = noMfuReason(s);
    } else {
      $('mfu-chart').hidden = false;
      mfuChart ??= lineChart($('mfu-chart'), [
        { label: 'MFU', color: '--accent', scale: 'mfu', value: (v) => pct(v), tick: (v) => pct(v, 0) },
        // Dashed: with the model fixed, MFU is tokens/s times a constant, and the lines coincide.
        {
          label: 'tokens/s',
          color: '--accent2',
          scale: 'tok',
          value: (v) => num(v),
          tick: short,
          dash: [6, 6],
        },
      ]);
      const pts = mfu.points;
      const cp = cps.checkpoints.filter((c) => c.phase === 'save');
      mfuNote.className = 'note';
      mfuNote.textContent = [
        `Dashed lines: faults (red), finding onsets (amber), checkpoint saves (green), interruptions and restarts (purple).`,
        tl.interruptions.length ? `${tl.interruptions.length} interruption(s).` : '',
        cp.length
          ? `Checkpoint saves: ${cp[0].count} (p50 ${ms(cp[0].p50_ms)}, max ${ms(cp[0].max_ms)}, ${cp[0].failures} failed), marked green (red: failed).`
          : 'No checkpoint saves recorded.',
        pts.some((p) => p.tokens_per_s === null) ? 'Tokens/s is missing where ranks report no tokens.' : '',
      ]
        .filter(Boolean)
        .join(' ');
      mfuChart.update(
        [
          pts.map((p) => p.ts / 1000),
          pts.map((p) => p.mfu),
          pts.map((p) => p.tokens_per_s),
        ] as uPlot.AlignedData,
        [...markers, ...timeMarks],
      );
    }

    const stepNote = $('step-note');
    stepNote.classList.remove('pending');
    if (!steps.points.length) {
      $('step-chart').hidden = true;
      stepNote.className = 'note empty';
      stepNote.textContent = 'No steps in the job’s range.';
    } else {
      stepChart ??= lineChart(
        $('step-chart'),
        [
          { label: 'wall step', color: '--fg', scale: 'ms', value: ms, tick: msTick },
          { label: 'compute p50', color: '--accent', scale: 'ms', value: ms },
          { label: 'compute slowest', color: '--bad', scale: 'ms', value: ms },
          { label: 'wait in collectives p50', color: '--accent2', scale: 'ms', value: ms },
        ],
        200,
      );
      const p = steps.points;
      stepChart.update(
        [
          p.map((x) => x.ts / 1000),
          p.map((x) => x.step_ms),
          p.map((x) => x.compute_p50_ms),
          p.map((x) => x.compute_max_ms),
          p.map((x) => x.comm_wait_p50_ms),
        ],
        markers,
      );
      stepNote.className = 'note';
      stepNote.textContent =
        'The slowest rank’s compute pulling away from the median is what a straggler costs every rank.';
    }

    const heatNote = $('heat-note');
    heatNote.classList.remove('pending');
    const canvas = $('heatmap') as HTMLCanvasElement;
    if (!heat.cells.length) {
      canvas.hidden = true;
      heatNote.className = 'note empty';
      heatNote.textContent = heat.refused
        ? `No heatmap: ${heat.refused}`
        : 'No per-rank compute in the job’s range.';
    } else {
      canvas.hidden = false;
      const rows = drawHeatmap(canvas, heat.cells);
      const worst = [...rows].sort((a, b) => b.mean_pct - a.mean_pct)[0];
      heatNote.className = 'note';
      heatNote.textContent = `${rows.length} ranks on ${new Set(rows.map((r) => r.host)).size} hosts, ${heatMinutes}-minute cells${heatFrom > s.first_ts ? ' (the last 6 hours)' : ''}. Slowest on average: rank ${worst.rank} on ${worst.host} GPU ${worst.gpu}, ${worst.mean_pct.toFixed(1)}% slower than its peers.`;
    }

    slowGpuTable($('slow-gpus'), slow.gpus);
    links(
      $('links'),
      fs.findings.filter((f) => LINK_TYPES.has(f.type)),
      s.hosts,
    );
    findingList($('findings'), fs.findings);
  }, 10_000);
}

function summary(el: HTMLElement, s: JobSummary): void {
  const kpi = (label: string, value: string, title = '') =>
    `<div class="kpi"${title ? ` title="${esc(title)}"` : ''}><span>${label}</span><b>${value}</b></div>`;
  el.innerHTML = `<h1>${esc(s.job)} <span class="badge ${s.status}">${s.status}</span></h1>
    <p class="muted">${s.ranks} ranks${s.world_size && s.world_size !== s.ranks ? ` of ${s.world_size}` : ''} × ${esc(s.gpu_model || 'unknown GPU')} on ${s.hosts.length} hosts · step ${s.last_step} · last event ${ago(s.last_ts)} (${time(s.last_ts)})</p>
    <div class="kpis">
      ${kpi('MFU now', hasMfu(s) ? pct(s.mfu_now) : 'none', hasMfu(s) ? '' : noMfuReason(s))}
      ${kpi('MFU average', mfuText(s.mfu_avg, '—'), 'model FLOPs over wall time, every step of the job')}
      ${kpi('tokens/s', num(s.tokens_per_s))}
      ${kpi('step', ms(s.step_ms))}
      ${kpi('compute', ms(s.compute_ms))}
      ${kpi('open findings', String(s.findings.length))}
      ${kpi('costliest finding', costliestCost(s.findings))}
    </div>
    ${!hasMfu(s) ? `<p class="note empty">${esc(noMfuReason(s))}</p>` : ''}`;
}

/** The costliest open finding's cost. Not a sum: findings overlap (a throttle explains a straggler). */
function costliestCost(fs: Finding[]): string {
  const c = Math.max(...fs.map((f) => f.est_cost_pct ?? 0), 0);
  return c > 0 ? costText(c) : '—';
}

/** Link findings as a list and a host-pair matrix (rows: suspect host, columns: its peer). */
function links(el: HTMLElement, fs: Finding[], hosts: string[]): void {
  // Resolved ones too: a finished job resolves its findings, and the picture should stay.
  const open = fs;
  if (!open.length) {
    el.innerHTML = `<p class="note">No slow link or low bus bandwidth found for this job. (Bus bandwidth by communicator kind is not served by the API yet; the Grafana “links” dashboard shows it.)</p>`;
    return;
  }
  const names = [...new Set([...hosts, ...open.flatMap((f) => [f.host, f.peer_host ?? f.host])])].sort(
    (a, b) => a.localeCompare(b, undefined, { numeric: true }),
  );
  const cost = (a: string, b: string) =>
    open
      .filter((f) => f.host === a && (f.peer_host ?? f.host) === b)
      .reduce((s, f) => s + (f.est_cost_pct ?? 0.1), 0);
  el.innerHTML = `<ul class="findings">${open.map((f) => `<li><b>${esc(f.type)}</b> ${esc(f.host)}${f.peer_host ? ` ↔ ${esc(f.peer_host)}` : ''} <span class="muted">(${f.state})</span>: ${esc(f.summary)}</li>`).join('')}</ul>
    <p class="muted small">Host pairs with a link finding (row: suspect host; column: its peer, or itself when the NIC is slow with every peer).</p>
    <table class="matrix"><tr><th></th>${names.map((h) => `<th>${esc(h)}</th>`).join('')}</tr>
    ${names
      .map(
        (a) =>
          `<tr><th>${esc(a)}</th>${names
            .map((b) => {
              const c = cost(a, b);
              return `<td class="${c ? 'hot' : ''}" title="${c ? `${costText(c)} cost` : ''}">${c ? costText(c) : ''}</td>`;
            })
            .join('')}</tr>`,
      )
      .join('')}</table>`;
}

const fmtEvidence = (v: unknown): string =>
  typeof v === 'number'
    ? Number.isInteger(v)
      ? String(v)
      : v.toPrecision(3)
    : typeof v === 'object'
      ? JSON.stringify(v)
      : String(v);

/** Findings newest first, one entry per incident (its latest state), with evidence and cost. */
function findingList(el: HTMLElement, fs: Finding[]): void {
  if (!fs.length) {
    el.innerHTML = '<p class="note">No findings for this job: no rank, link or GPU stands out.</p>';
    return;
  }
  el.innerHTML = `<ul class="findings">${fs
    .sort((a, b) => b.ts - a.ts)
    .map(
      (
        f,
      ) => `<li class="finding ${f.severity} ${f.state}" data-id="${esc(f.id)}" data-type="${esc(f.type)}" data-host="${esc(f.host)}" data-gpu="${f.gpu ?? ''}" data-cost="${esc(costText(f.est_cost_pct, ''))}">
      <div><span class="badge ${f.severity}">${esc(f.type)}</span> <b>${esc(f.host)}${f.gpu !== undefined ? ` GPU ${f.gpu}` : ''}${f.rank !== undefined ? ` · rank ${f.rank}` : ''}${f.peer_host ? ` ↔ ${esc(f.peer_host)}` : ''}</b>
        <span class="muted">${f.state} ${ago(f.ts)} · action ${esc(f.action)}${f.est_cost_pct !== undefined ? ` · <span class="cost">costs ${costText(f.est_cost_pct)} of throughput</span>` : ''}</span></div>
      <p>${esc(f.summary)}</p>${f.resolution ? `<p class="muted resolution">Resolved: ${esc(f.resolution)}</p>` : ''}${ackLine(f)}
      <details><summary>evidence</summary><dl>${Object.entries(f.evidence)
        .map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(fmtEvidence(v))}</dd>`)
        .join('')}</dl></details></li>`,
    )
    .join('')}</ul>`;
}

/** Who acked or silenced the incident, and when: empty when nobody did. */
function ackLine(f: Finding): string {
  const parts = [
    f.acked_by ? `acked by <b>${esc(f.acked_by)}</b>${f.acked_at ? ` ${ago(f.acked_at)}` : ''}` : '',
    f.silenced_until !== undefined
      ? `silenced${f.silenced_by ? ` by <b>${esc(f.silenced_by)}</b>` : ''} until ${time(f.silenced_until)}`
      : '',
  ].filter(Boolean);
  return parts.length ? `<p class="acks small">${parts.join(' · ')}</p>` : '';
}
