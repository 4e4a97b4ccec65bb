/**
 * The rank heatmap on a canvas: one row per rank, grouped by host; one column per minute; colour
 * = how much slower the rank's compute was than its pipeline-stage peers in that minute. A
 * straggler is a row that turns red. What was drawn (rows, their place and mean) is kept in
 * `data-rows` so people and tests can read it back.
 */
import type { Cell } from './api.js';
import { cssVar } from './format.js';

/** Percent slower than peers at which a cell is fully red. */
const FULL_PCT = 20;
const LABEL_W = 170;

interface Row {
  rank: number;
  host: string;
  gpu: number;
  stage: number;
  y: number;
  h: number;
  /** mean of the row's cells, percent slower than peers (negative: faster) */
  mean_pct: number;
  max_pct: number;
}

const rgb = (hex: string): [number, number, number] => {
  const m = /^#?([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex);
  return m
    ? [Number.parseInt(m[1], 16), Number.parseInt(m[2], 16), Number.parseInt(m[3], 16)]
    : [128, 128, 128];
};
const mix = (a: number[], b: number[], t: number) =>
  `rgb(${a.map((v, i) => Math.round(v + (b[i] - v) * t)).join(',')})`;

export function drawHeatmap(canvas: HTMLCanvasElement, cells: Cell[]): Row[] {
  const minutes = [...new Set(cells.map((c) => c.minute))].sort((a, b) => a - b);
  const col = new Map(minutes.map((m, i) => [m, i]));
  const byRank = new Map<number, Cell[]>();
  for (const c of cells) byRank.set(c.rank, [...(byRank.get(c.rank) ?? []), c]);
  const ranks = [...byRank.values()]
    .map((cs) => cs[0])
    .sort(
      (a, b) =>
        a.host.localeCompare(b.host, undefined, { numeric: true }) || a.gpu - b.gpu || a.rank - b.rank,
    );

  const dpr = devicePixelRatio;
  const width = Math.max(400, canvas.parentElement?.clientWidth ?? 800);
  const rowH = Math.max(3, Math.min(14, Math.floor(480 / Math.max(1, ranks.length))));
  const hosts = new Set(ranks.map((r) => r.host)).size;
  const gap = 3;
  const height = ranks.length * rowH + hosts * gap + 4;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  canvas.width = width * dpr;
  canvas.height = height * dpr;
  const ctx = canvas.getContext('2d');
  if (!ctx) return [];
  ctx.scale(dpr, dpr);
  const colW = (width - LABEL_W) / Math.max(1, minutes.length);
  const cold = rgb(cssVar('--heat-fast'));
  const calm = rgb(cssVar('--heat-0'));
  const hot = rgb(cssVar('--heat-hot'));
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'middle';

  const rows: Row[] = [];
  let y = 0;
  let lastHost = '';
  for (const r of ranks) {
    if (r.host !== lastHost) {
      y += gap;
      ctx.fillStyle = cssVar('--fg');
      ctx.fillText(r.host, 4, y + Math.max(rowH, 12) / 2);
      lastHost = r.host;
    }
    const cs = byRank.get(r.rank) ?? [];
    const pcts = cs.map((c) => (c.rel_compute - 1) * 100);
    for (const c of cs) {
      const p = (c.rel_compute - 1) * 100;
      ctx.fillStyle =
        p >= 0 ? mix(calm, hot, Math.min(1, p / FULL_PCT)) : mix(calm, cold, Math.min(1, -p / FULL_PCT));
      const x = LABEL_W + (col.get(c.minute) ?? 0) * colW;
      ctx.fillRect(x, y, Math.ceil(colW), rowH - (rowH > 5 ? 1 : 0));
    }
    if (rowH >= 10) {
      ctx.fillStyle = cssVar('--muted');
      ctx.fillText(`r${r.rank} g${r.gpu}`, LABEL_W - 52, y + rowH / 2);
    }
    const mean = pcts.reduce((a, b) => a + b, 0) / Math.max(1, pcts.length);
    rows.push({
      rank: r.rank,
      host: r.host,
      gpu: r.gpu,
      stage: r.stage,
      y,
      h: rowH,
      mean_pct: mean,
      max_pct: Math.max(...pcts),
    });
    y += rowH;
  }
  canvas.dataset.rows = JSON.stringify(rows);
  canvas.dataset.left = String(LABEL_W);
  canvas.dataset.minutes = String(minutes.length);

  canvas.onmousemove = (e) => {
    const rect = canvas.getBoundingClientRect();
    const px = e.clientX - rect.left;
    const py = e.clientY - rect.top;
    const row = rows.find((r) => py >= r.y && py < r.y + r.h);
    const i = Math.floor((px - LABEL_W) / colW);
    const c = row && px >= LABEL_W ? byRank.get(row.rank)?.find((x) => col.get(x.minute) === i) : undefined;
    canvas.title = c
      ? `rank ${c.rank} · ${c.host} GPU ${c.gpu} · stage ${c.stage}\n${new Date(c.minute).toLocaleTimeString()}: ${((c.rel_compute - 1) * 100).toFixed(1)}% vs peers`
      : row
        ? `rank ${row.rank} · ${row.host} GPU ${row.gpu}: mean ${row.mean_pct.toFixed(1)}% vs peers`
        : '';
  };
  return rows;
}
