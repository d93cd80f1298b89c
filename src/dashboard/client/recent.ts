/** The recent requests table, newest first; rows not in the previous snapshot flash. */
import { $, byId, el, replaceRows, td } from './dom.js';
import { fmtMs, fmtTime } from './format.js';
import type { DashboardSnapshot, RecentRequest } from './snapshot.js';

/** The rows of the last snapshot rendered (none before the first). */
let seen: Set<string> | null = null;

function outcomeBadge(outcome: string): HTMLSpanElement {
  const cls =
    outcome === 'completed'
      ? 'ok'
      : outcome === 'failed' || outcome === 'error'
        ? 'bad'
        : outcome === 'client_gone'
          ? 'neutral'
          : 'warn';
  return el('span', { cls: `badge ${cls}`, text: outcome });
}

function statusClass(status: number): string {
  return status >= 500 ? 'status-bad' : status >= 400 ? 'status-warn' : 'status-ok';
}

function requestRow(r: RecentRequest, fresh: boolean): HTMLTableRowElement {
  return el(
    'tr',
    {
      'data-request-id': r.requestId,
      'data-outcome': r.outcome,
      cls: (fresh ? 'fresh ' : '') + (r.outcome === 'failed' || r.status >= 500 ? 'failed' : '') || null,
    },
    [
      td(fmtTime(r.at), 'mono muted'),
      el('td', null, [el('span', { cls: 'mono rid', title: r.requestId, text: r.requestId })]),
      td(r.route, 'mono'),
      el('td', null, [el('span', { cls: 'mono name', text: r.model, title: r.model })]),
      td(String(r.status), `num ${statusClass(r.status)}`),
      el('td', null, [outcomeBadge(r.outcome)]),
      r.code ? el('td', { cls: 'code', text: r.code }) : td('–', 'faint'),
      r.worker ? td(r.worker, 'mono') : td('–', 'faint'),
      td(fmtMs(r.durationMs), 'num'),
      td(fmtMs(r.ttftMs), `num${r.ttftMs === undefined || r.ttftMs === null ? ' faint' : ''}`),
    ],
  );
}

export function renderRecent(s: DashboardSnapshot): void {
  const before = seen;
  const now = new Set<string>();
  const rows = s.recent.map((r) => {
    const rowKey = `${r.requestId}@${r.at}`;
    now.add(rowKey);
    return requestRow(r, before !== null && !before.has(rowKey));
  });
  seen = now;
  replaceRows(byId('recent', HTMLTableElement), rows, 10, 'No finished request yet.');
  $('recent-sub').textContent = s.recent.length ? `last ${s.recent.length}, newest first` : '';
}
