/** Line charts drawn by hand in SVG, over the snapshot's history window (minutes on the x axis). */
import { svg } from './dom.js';
import type { DashboardSnapshot } from './snapshot.js';

/** One series: a value (or none) per time of `series.t`. */
export interface Line {
  color: string;
  values: readonly (number | null)[];
  dash?: boolean;
}

export interface PlotOptions {
  /** The top of the y axis when every value is 0 or there is none. */
  minMax: number;
  tick: (v: number) => string;
  /** Said in the middle of a chart with no value at all. */
  empty: string;
}

const HEIGHT = 170;
const MARGIN = { l: 46, r: 10, t: 8, b: 22 };

/** A round step (1, 2, 2.5 or 5 times a power of ten) giving about `ticks` steps over `range`. */
function niceStep(range: number, ticks: number): number {
  const raw = range / ticks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10;
  return step * mag;
}

type Scale = (value: number) => number;

/** The path of a line (a break where a value is missing or two times are far apart), and its lone points. */
function trace(line: Line, ts: readonly number[], t0: number, gap: number, x: Scale, y: Scale) {
  let d = '';
  let run = 0;
  let runStart: [string, string] | null = null;
  let prevT: number | null = null;
  const lone: Array<[string, string]> = [];
  const endRun = () => {
    if (run === 1 && runStart) lone.push(runStart);
    run = 0;
  };
  for (let i = 0; i < ts.length; i++) {
    const val = line.values[i];
    const t = ts[i]!;
    if (t < t0 || val === null || val === undefined) {
      endRun();
      prevT = null;
      continue;
    }
    if (prevT !== null && t - prevT > gap) endRun();
    const px = x(t).toFixed(1);
    const py = y(val).toFixed(1);
    d += `${(run === 0 ? 'M' : 'L') + px} ${py}`;
    if (run === 0) runStart = [px, py];
    run++;
    prevT = t;
  }
  endRun();
  return { d, lone };
}

export function drawPlot(
  svgEl: SVGSVGElement,
  s: DashboardSnapshot,
  lines: readonly Line[],
  opts: PlotOptions,
): void {
  const width = Math.max(200, Math.round(svgEl.getBoundingClientRect().width || 400));
  const m = MARGIN;
  const w = width - m.l - m.r;
  const h = HEIGHT - m.t - m.b;
  svgEl.setAttribute('viewBox', `0 0 ${width} ${HEIGHT}`);
  const nodes: SVGElement[] = [];
  const t1 = s.at;
  const t0 = t1 - s.windows.historyS * 1000;
  const ts = s.series.t;
  let ymax = 0;
  for (const line of lines)
    line.values.forEach((v, i) => {
      const t = ts[i];
      if (v !== null && t !== undefined && t >= t0 && v > ymax) ymax = v;
    });
  const hasData = ymax > 0 || lines.some((line) => line.values.some((v) => v !== null));
  if (ymax <= 0) ymax = opts.minMax;
  const step = niceStep(ymax, 4);
  const top = Math.ceil((ymax * 1.05) / step) * step;
  const x = (t: number) => m.l + ((t - t0) / (t1 - t0)) * w;
  const y = (v: number) => m.t + h - (v / top) * h;
  for (let v = 0; v <= top + step / 2; v += step) {
    const yy = y(v).toFixed(1);
    nodes.push(svg('line', { x1: m.l, x2: m.l + w, y1: yy, y2: yy, class: v === 0 ? 'axis' : 'gridline' }));
    nodes.push(
      svg('text', { x: m.l - 6, y: (+yy + 3.5).toFixed(1), 'text-anchor': 'end', text: opts.tick(v) }),
    );
  }
  const minutes = Math.round(s.windows.historyS / 60);
  for (let k = 0; k <= minutes; k++) {
    const tx = x(t1 - (minutes - k) * 60000);
    nodes.push(
      svg('line', { x1: tx.toFixed(1), x2: tx.toFixed(1), y1: m.t, y2: m.t + h, class: 'gridline' }),
    );
    nodes.push(
      svg('text', {
        x: tx.toFixed(1),
        y: HEIGHT - 6,
        'text-anchor': k === 0 ? 'start' : k === minutes ? 'end' : 'middle',
        text: k === minutes ? 'now' : `-${minutes - k} min`,
      }),
    );
  }
  const gap = s.intervalMs * 2.5;
  for (const line of lines) {
    const { d, lone } = trace(line, ts, t0, gap, x, (v) => y(Math.min(v, top)));
    const attrs: Record<string, string | number> = {
      d: d,
      fill: 'none',
      stroke: line.color,
      'stroke-width': line.dash ? 1.5 : 2,
      'stroke-linejoin': 'round',
      'stroke-linecap': 'round',
    };
    if (line.dash) attrs['stroke-dasharray'] = '4 3';
    if (d) nodes.push(svg('path', attrs));
    for (const p of lone) nodes.push(svg('circle', { cx: p[0], cy: p[1], r: 2.2, fill: line.color }));
  }
  if (!hasData)
    nodes.push(
      svg('text', {
        x: m.l + w / 2,
        y: m.t + h / 2,
        'text-anchor': 'middle',
        class: 'nodata',
        text: opts.empty,
      }),
    );
  svgEl.replaceChildren(...nodes);
}
