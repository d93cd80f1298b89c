/** The workers table: health, circuit and load of each worker. */
import { $, byId, el, replaceRows } from './dom.js';
import { fmtCount } from './format.js';
import type { DashboardSnapshot, DashboardWorker } from './snapshot.js';

function circuitBadge(state: DashboardWorker['circuit']): HTMLSpanElement {
  if (state === 'closed') return el('span', { cls: 'badge ok', text: 'closed' });
  if (state === 'half_open') return el('span', { cls: 'badge warn', text: 'half-open' });
  return el('span', { cls: 'badge bad', text: state });
}

/** In-flight then queued requests as a share of the worker's slots (of the queue beyond them when it is over). */
function loadBar(w: DashboardWorker): HTMLDivElement {
  const max = Math.max(1, w.maxConcurrent);
  const total = Math.max(max, w.inflight + w.queued);
  const bar = el('div', {
    cls: `bar${w.inflight >= max ? ' full' : ''}`,
    title: `${Math.round(w.load * 100)}% of ${w.maxConcurrent} slots`,
  });
  const inPct = (w.inflight / total) * 100;
  const qPct = (w.queued / total) * 100;
  bar.appendChild(el('span', { cls: 'in', style: `width:${inPct.toFixed(2)}%` }));
  if (w.queued > 0)
    bar.appendChild(el('span', { cls: 'q', style: `left:${inPct.toFixed(2)}%;width:${qPct.toFixed(2)}%` }));
  return el('div', { cls: 'load' }, [
    bar,
    el('span', { cls: 'nums', text: `${w.inflight} / ${w.queued} / ${w.maxConcurrent}` }),
  ]);
}

/** The scorer decisions it won, by the scorer that decided them, most first. */
function routedBy(w: DashboardWorker): HTMLTableCellElement {
  const wins = Object.entries(w.routedBy).sort((a, b) => b[1] - a[1]);
  if (wins.length === 0) return el('td', { cls: 'faint', text: '–' });
  return el(
    'td',
    { 'data-routed-by': wins.map(([name, n]) => `${name}:${n}`).join(' ') },
    wins.map(([name, n]) => el('span', { cls: 'chip', text: `${name} ${fmtCount(n)}` })),
  );
}

function workerRow(w: DashboardWorker): HTMLTableRowElement {
  const models = el(
    'td',
    null,
    w.models.length
      ? w.models.map((m) => el('span', { cls: 'chip name', text: m, title: m }))
      : [el('span', { cls: 'faint', text: 'none discovered' })],
  );
  const health = el('td', null, [
    el('span', { cls: 'health' }, [
      el('span', { cls: `dot ${w.healthy ? 'ok' : 'bad'}` }),
      el('span', { cls: 'health-text', text: w.healthy ? 'healthy' : 'unhealthy' }),
    ]),
    !w.healthy && w.lastError
      ? el('span', { cls: 'err', title: w.lastError.message, text: w.lastError.code })
      : null,
  ]);
  return el('tr', { 'data-worker-id': w.id, 'data-healthy': String(w.healthy) }, [
    el('td', null, [
      el('strong', { text: w.id }),
      el('span', { cls: 'sub mono', text: w.url + (w.dpSize > 1 ? `  ·  dp ${w.dpSize}` : '') }),
    ]),
    models,
    health,
    el('td', null, [circuitBadge(w.circuit)]),
    el('td', null, [loadBar(w)]),
    routedBy(w),
  ]);
}

export function renderWorkers(s: DashboardSnapshot): void {
  replaceRows(byId('workers', HTMLTableElement), s.workers.map(workerRow), 6, 'No worker registered.');
  $('workers-sub').textContent = s.workers.length + (s.workers.length === 1 ? ' worker' : ' workers');
}
