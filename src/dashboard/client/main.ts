/**
 * The dashboard page's script, run in the browser: reads the snapshot stream (SSE, falling back to
 * polling), renders the tables and plots the series in SVG by hand. Compiled by tsc (the
 * tsconfig.json beside it, DOM types) and linked into the page's one inline script by
 * src/dashboard/client-script.ts.
 */
import { connect } from './connection.js';
import { renderPlots } from './plots.js';
import { handle, lastSnapshot, updateAge } from './render.js';

window.addEventListener('resize', () => {
  const last = lastSnapshot();
  if (last) renderPlots(last);
});
connect({ onText: handle, onTick: updateAge });
