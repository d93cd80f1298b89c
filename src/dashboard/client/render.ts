/** Renders a snapshot on the whole page, and says how old the last one is. */
import { assignColors } from './colors.js';
import { $ } from './dom.js';
import { renderFailures } from './failures.js';
import { renderHeader } from './header.js';
import { renderModels } from './models.js';
import { renderPlots } from './plots.js';
import { renderRecent } from './recent.js';
import { renderRouting } from './routing.js';
import type { DashboardSnapshot } from './snapshot.js';
import { renderWorkers } from './workers.js';

let last: DashboardSnapshot | null = null;
let lastAt = 0;

/** The snapshot on the page, if any. */
export function lastSnapshot(): DashboardSnapshot | null {
  return last;
}

export function updateAge(): void {
  if (!lastAt) {
    $('conn-age').textContent = '';
    return;
  }
  const age = Math.round((Date.now() - lastAt) / 1000);
  $('conn-age').textContent = age <= 1 ? 'updated just now' : `updated ${age} s ago`;
}

export function render(s: DashboardSnapshot): void {
  last = s;
  lastAt = Date.now();
  assignColors(s);
  renderHeader(s);
  renderWorkers(s);
  renderModels(s);
  renderPlots(s);
  renderFailures(s);
  renderRecent(s);
  renderRouting(s);
  document.body.setAttribute('data-snapshot-at', String(s.at));
  updateAge();
}

function isSnapshot(value: unknown): value is DashboardSnapshot {
  return typeof value === 'object' && value !== null && 'version' in value && value.version === 1;
}

/** Renders a snapshot's JSON; anything else (not JSON, another version) is ignored. */
export function handle(text: string): void {
  let s: unknown;
  try {
    s = JSON.parse(text);
  } catch {
    return;
  }
  if (!isSnapshot(s)) return;
  render(s);
}
