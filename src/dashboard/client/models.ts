/** The models table: workers serving each model, its rates and latencies. */
import { colorOf } from './colors.js';
import { byId, el, replaceRows, td } from './dom.js';
import { fmtCount, fmtMs, fmtRate } from './format.js';
import type { DashboardSnapshot } from './snapshot.js';

interface WorkerCount {
  all: number;
  healthy: number;
}

export function renderModels(s: DashboardSnapshot): void {
  const counts = new Map<string, WorkerCount>();
  for (const w of s.workers)
    for (const m of w.models) {
      let c = counts.get(m);
      if (!c) {
        c = { all: 0, healthy: 0 };
        counts.set(m, c);
      }
      c.all++;
      if (w.healthy) c.healthy++;
    }
  const rows = s.models.map((m) => {
    const c = counts.get(m.model) ?? { all: 0, healthy: 0 };
    return el('tr', { 'data-model': m.model }, [
      el('td', null, [
        el('span', {
          cls: 'sw-dot',
          style:
            'display:inline-block;width:8px;height:8px;border-radius:2px;margin-right:8px;background:' +
            colorOf(m.model),
        }),
        el('span', { cls: 'mono name', text: m.model, title: m.model }),
      ]),
      td(`${c.healthy} / ${c.all}`, `num${c.healthy === 0 && c.all > 0 ? ' status-bad' : ''}`),
      td(fmtRate(m.rps), 'num'),
      td(fmtCount(m.requests), 'num'),
      td(fmtCount(m.errors), `num${m.errors > 0 ? ' status-bad' : ' faint'}`),
      td(fmtCount(m.streamFailures), `num${m.streamFailures > 0 ? ' status-bad' : ' faint'}`),
      td(fmtMs(m.ttftP50Ms), 'num'),
      td(fmtMs(m.ttftP95Ms), 'num'),
      td(fmtMs(m.itlP50Ms), 'num'),
      td(fmtMs(m.itlP95Ms), 'num'),
    ]);
  });
  replaceRows(byId('models', HTMLTableElement), rows, 10, 'No model yet.');
}
