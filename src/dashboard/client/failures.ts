/** The stream failures panel: every reason with its total and its count in the window, then the busiest series. */
import { $, el } from './dom.js';
import { fmtCount, windowLabel } from './format.js';
import type { DashboardSnapshot, FailureCount } from './snapshot.js';

function reasonRow(r: FailureCount, max: number): HTMLDivElement {
  const bar = el('div', { cls: 'bar' }, [
    el('span', { cls: 'in', style: `width:${((r.total / max) * 100).toFixed(2)}%` }),
  ]);
  return el('div', { cls: `fail-row${r.total === 0 ? ' zero' : ''}`, 'data-reason': r.reason }, [
    el('span', { cls: 'name', text: r.reason }),
    bar,
    el('span', { cls: 'n', text: fmtCount(r.total) }),
    el('span', { cls: 'w', text: r.window > 0 ? `+${r.window}` : '–' }),
  ]);
}

export function renderFailures(s: DashboardSnapshot): void {
  const f = s.streamFailures;
  let max = 1;
  for (const r of f.byReason) if (r.total > max) max = r.total;
  const box = document.createDocumentFragment();
  box.appendChild(
    el('div', { cls: 'fail-head' }, [
      el('span', { text: 'Reason' }),
      el('span'),
      el('span', { text: 'Total' }),
      el('span', { text: windowLabel(f.windowS) }),
    ]),
  );
  for (const r of f.byReason) box.appendChild(reasonRow(r, max));
  if (f.bySeries.length > 0) {
    const list = el('div', { cls: 'fail-series' }, ['By API and model: ']);
    f.bySeries.slice(0, 8).forEach((x, i) => {
      if (i > 0) list.appendChild(document.createTextNode(' · '));
      list.appendChild(el('span', { cls: 'mono', text: `${x.api} / ${x.model} / ${x.reason}` }));
      list.appendChild(document.createTextNode(` ${x.count}`));
    });
    box.appendChild(list);
  }
  $('failures').replaceChildren(box);
  $('fail-sub').textContent = `${f.total} since start`;
}
