/**
 * Time-series charts (uPlot) and canvas sparklines. Colours come from the theme's CSS variables,
 * so charts read in light and dark. Markers (checkpoints, faults, finding onsets) are vertical
 * lines drawn after the series.
 */
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { cssVar } from './format.js';

export interface Marker {
  ts: number;
  label: string;
  /** CSS variable name for the colour, e.g. --bad. */
  color: string;
}

export interface SeriesSpec {
  label: string;
  color: string;
  scale: string;
  value: (v: number) => string;
  /** Axis tick labels (short); default `value`. */
  tick?: (v: number) => string;
  /** Counts: drawn as bars from 0, whole-number ticks. */
  counts?: boolean;
  /** A dashed line (canvas setLineDash), so a series drawn over another leaves it visible. */
  dash?: number[];
}

export interface Chart {
  update(data: uPlot.AlignedData, markers: Marker[]): void;
}

export function lineChart(el: HTMLElement, specs: SeriesSpec[], height = 220): Chart {
  let markers: Marker[] = [];
  const counts = specs.some((s) => s.counts);
  const axis = (scale: string, side: 0 | 1 | 2 | 3, fmt: (v: number) => string) => ({
    scale,
    ...(counts ? { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000] } : {}),
    side,
    stroke: cssVar('--muted'),
    grid: { stroke: cssVar('--grid'), width: 1 },
    ticks: { stroke: cssVar('--grid'), width: 1 },
    values: (_u: uPlot, vals: number[]) => vals.map((v) => (v === null ? '' : fmt(v))),
    size: 60,
  });
  const scales = [...new Set(specs.map((s) => s.scale))];
  const opts: uPlot.Options = {
    width: Math.max(320, el.clientWidth),
    height,
    cursor: { drag: { x: true, y: false } },
    legend: { live: true },
    scales: Object.fromEntries(
      scales.map((s) => [
        s,
        counts
          ? { range: (_u: uPlot, _lo: number, hi: number): uPlot.Range.MinMax => [0, Math.max(2, hi)] }
          : { auto: true },
      ]),
    ),
    series: [
      {},
      ...specs.map((s) => ({
        label: s.label,
        scale: s.scale,
        stroke: cssVar(s.color),
        width: 1.5,
        points: { show: false },
        ...(s.dash ? { dash: s.dash } : {}),
        ...(s.counts ? { paths: uPlot.paths.bars?.({ size: [0.9, 40] }), fill: cssVar(s.color) } : {}),
        value: (_u: uPlot, v: number | null) => (v === null ? '—' : s.value(v)),
        spanGaps: false,
      })),
    ],
    axes: [
      {
        stroke: cssVar('--muted'),
        grid: { stroke: cssVar('--grid'), width: 1 },
        ticks: { stroke: cssVar('--grid') },
      },
      ...scales.map((scale, i) =>
        axis(
          scale,
          i === 0 ? 3 : 1,
          ((s) => s?.tick ?? s?.value ?? String)(specs.find((s) => s.scale === scale)),
        ),
      ),
    ],
    hooks: {
      draw: [
        (u) => {
          const { ctx, bbox } = u;
          ctx.save();
          ctx.lineWidth = Math.max(1, devicePixelRatio);
          ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
          let row = 0;
          let lastX = Number.NEGATIVE_INFINITY;
          for (const m of [...markers].sort((a, b) => a.ts - b.ts)) {
            const x = Math.round(u.valToPos(m.ts / 1000, 'x', true));
            if (x < bbox.left || x > bbox.left + bbox.width) continue;
            ctx.strokeStyle = ctx.fillStyle = cssVar(m.color);
            ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
            ctx.beginPath();
            ctx.moveTo(x, bbox.top);
            ctx.lineTo(x, bbox.top + bbox.height);
            ctx.stroke();
            // Labels of markers close together go on successive lines instead of over each other.
            row = x - lastX < 120 * devicePixelRatio ? (row + 1) % 4 : 0;
            lastX = x;
            ctx.setLineDash([]);
            ctx.fillText(m.label, x + 3 * devicePixelRatio, bbox.top + (12 + 13 * row) * devicePixelRatio);
          }
          ctx.restore();
        },
      ],
    },
  };
  const plot = new uPlot(opts, [[], ...specs.map(() => [])], el);
  const resize = () => plot.setSize({ width: Math.max(320, el.clientWidth), height });
  new ResizeObserver(resize).observe(el);
  return {
    update(data, m) {
      markers = m;
      plot.setData(data);
    },
  };
}

/** A small line of values on a canvas (the jobs table's MFU column). */
export function sparkline(canvas: HTMLCanvasElement, values: number[]): void {
  const dpr = devicePixelRatio;
  const w = canvas.clientWidth || 120;
  const h = canvas.clientHeight || 24;
  canvas.width = w * dpr;
  canvas.height = h * dpr;
  const ctx = canvas.getContext('2d');
  if (!ctx || values.length < 2) return;
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  const span = hi - lo || 1;
  ctx.strokeStyle = cssVar('--accent');
  ctx.lineWidth = 1.5 * dpr;
  ctx.beginPath();
  values.forEach((v, i) => {
    const x = (i / (values.length - 1)) * (w - 2) * dpr + dpr;
    const y = (h - 3 - ((v - lo) / span) * (h - 6)) * dpr;
    if (i === 0) ctx.moveTo(x, y);
    else ctx.lineTo(x, y);
  });
  ctx.stroke();
}
