/** The three charts (request rate, time to first token, inter-token latency), their legends and units. */
import { drawPlot, type Line } from './chart.js';
import { colorOf } from './colors.js';
import { $, byId, el } from './dom.js';
import { fmtMs, fmtRate } from './format.js';
import type { DashboardSnapshot } from './snapshot.js';

function legendItem(color: string, dash: boolean, label: string, value: string): HTMLSpanElement {
  return el('span', { cls: 'item' }, [
    el('span', { cls: `sw${dash ? ' dash' : ''}`, style: `border-color:${color}` }),
    el('span', { text: label }),
    value ? el('span', { cls: 'val', text: value }) : null,
  ]);
}

/** Milliseconds on an axis: seconds from 1000 on. */
function msTick(v: number): string {
  return v >= 1000
    ? `${(v / 1000).toFixed(v % 1000 === 0 ? 0 : 1)} s`
    : `${v < 10 && v % 1 !== 0 ? v.toFixed(1) : Math.round(v)}`;
}

export function renderPlots(s: DashboardSnapshot): void {
  const rpsLines: Line[] = [];
  const ttftLines: Line[] = [];
  const itlLines: Line[] = [];
  const rpsLegend: HTMLSpanElement[] = [];
  const ttftLegend: HTMLSpanElement[] = [];
  const itlLegend: HTMLSpanElement[] = [];
  for (const sm of s.series.models) {
    const c = colorOf(sm.model);
    rpsLines.push({ color: c, values: sm.rps });
    ttftLines.push({ color: c, values: sm.ttftP95Ms, dash: true }, { color: c, values: sm.ttftP50Ms });
    itlLines.push({ color: c, values: sm.itlP95Ms, dash: true }, { color: c, values: sm.itlP50Ms });
    const model = s.models.find((m) => m.model === sm.model);
    rpsLegend.push(legendItem(c, false, sm.model, model ? `${fmtRate(model.rps)} req/s` : ''));
    ttftLegend.push(
      legendItem(c, false, sm.model, model ? `${fmtMs(model.ttftP50Ms)} / ${fmtMs(model.ttftP95Ms)}` : ''),
    );
    itlLegend.push(
      legendItem(c, false, sm.model, model ? `${fmtMs(model.itlP50Ms)} / ${fmtMs(model.itlP95Ms)}` : ''),
    );
  }
  drawPlot(byId('plot-rps', SVGSVGElement), s, rpsLines, {
    minMax: 1,
    tick: (v) => (v % 1 === 0 ? String(v) : v.toFixed(v < 1 ? 2 : 1)),
    empty: 'Collecting data…',
  });
  drawPlot(byId('plot-ttft', SVGSVGElement), s, ttftLines, {
    minMax: 10,
    tick: msTick,
    empty: 'No streaming request in the window',
  });
  drawPlot(byId('plot-itl', SVGSVGElement), s, itlLines, {
    minMax: 10,
    tick: msTick,
    empty: 'No streamed tokens in the window',
  });
  $('legend-rps').replaceChildren(...rpsLegend);
  $('legend-ttft').replaceChildren(...ttftLegend);
  $('legend-itl').replaceChildren(...itlLegend);
  $('unit-rps').textContent = `req/s · ${s.windows.rateS} s average`;
  $('unit-ttft').textContent = `ms · p50 solid, p95 dashed · ${s.windows.quantileS} s window`;
  $('unit-itl').textContent = `ms · p50 solid, p95 dashed · ${s.windows.quantileS} s window`;
}
