/** The scorer's last routing decisions: which worker, which scorer set it apart, the scores. */
import { $, byId, el, replaceRows, td } from './dom.js';
import { fmtTime } from './format.js';
import type { DashboardSnapshot } from './snapshot.js';

type Decision = DashboardSnapshot['routing']['last'][number];

function scores(d: Decision): HTMLTableCellElement {
  return el(
    'td',
    { cls: 'mono muted' },
    d.scores.map((s) =>
      el('span', {
        cls: 'chip',
        title: Object.entries(s.by)
          .map(([name, v]) => `${name} ${v}`)
          .join(', '),
        text: `${s.id} ${s.total}`,
      }),
    ),
  );
}

function decisionRow(d: Decision): HTMLTableRowElement {
  const filtered = Object.entries(d.filtered)
    .filter(([, n]) => n > 0)
    .map(([name, n]) => `${n} ${name}`)
    .join(', ');
  return el('tr', { 'data-decided-by': d.decidedBy }, [
    td(fmtTime(d.at), 'mono muted'),
    el('td', null, [el('span', { cls: 'mono name', text: d.model, title: d.model })]),
    td(d.worker, 'mono'),
    el('td', null, [el('span', { cls: 'badge info', text: d.decidedBy })]),
    filtered ? td(filtered) : td('–', 'faint'),
    scores(d),
  ]);
}

export function renderRouting(s: DashboardSnapshot): void {
  replaceRows(
    byId('routing', HTMLTableElement),
    s.routing.last.map(decisionRow),
    6,
    'No scorer decision yet (routing.policy: scorer).',
  );
  const waiting = Object.values(s.routing.waiting).reduce((a, b) => a + b, 0);
  $('routing-sub').textContent = waiting > 0 ? `${waiting} waiting for a worker that is not saturated` : '';
}
