/** The top bar's figures, and the banners (draining, several gateway processes). */
import { $, el } from './dom.js';
import { fmtRate, windowLabel } from './format.js';
import type { DashboardSnapshot } from './snapshot.js';

function kpi(label: string, value: string, bad?: boolean): HTMLDivElement {
  return el('div', { cls: `kpi${bad ? ' bad' : ''}` }, [
    el('span', { cls: 'v', text: value }),
    el('span', { cls: 'l', text: label }),
  ]);
}

export function renderHeader(s: DashboardSnapshot): void {
  let rps = 0;
  let anyRate = false;
  for (const m of s.models)
    if (m.rps !== null) {
      rps += m.rps;
      anyRate = true;
    }
  let failWindow = 0;
  for (const r of s.streamFailures.byReason) failWindow += r.window;
  const g = s.gateway;
  $('kpis').replaceChildren(
    kpi('healthy workers', `${g.healthyWorkers} / ${g.workers}`, g.healthyWorkers < g.workers),
    kpi('req/s', anyRate ? fmtRate(rps) : '–'),
    kpi('in flight', String(g.inflight)),
    kpi('queued', String(g.queued), g.queued > 0),
    kpi(`stream failures, last ${windowLabel(s.streamFailures.windowS)}`, String(failWindow), failWindow > 0),
  );
  $('draining').hidden = !g.draining;
  const processBanner = $('process');
  processBanner.hidden = !(g.processes > 1);
  if (g.processes > 1) {
    processBanner.textContent =
      'This page shows gateway process ' +
      g.pid +
      ', one of ' +
      g.processes +
      ' sharing the port: each process routes, checks health and keeps its dashboard on its own, and a reload may show another. /metrics sums all of them.';
  }
}
