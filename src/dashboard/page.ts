import { readFileSync } from 'node:fs';

/**
 * The dashboard page: one self-contained HTML document (inline style and script, no external
 * asset), plotting by hand in SVG. It reads `key` from its own URL and passes it on to
 * `/dashboard/events` and `/dashboard/data`, since an EventSource cannot set headers. It listens
 * on SSE and falls back to polling the JSON snapshot when the event stream fails. Its script is
 * written in TypeScript (src/dashboard/client/, checked by tsc with the DOM's types) and bundled
 * by esbuild into the one inline script.
 */
const PAGE_HEAD = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>sluice · dashboard</title>
<style>
:root {
  --bg: #f4f6f9; --card: #ffffff; --fg: #172033; --muted: #667085; --faint: #98a2b3;
  --line: #e4e7ec; --grid: #eef0f4; --head: #f8f9fb;
  --ok: #12805c; --ok-bg: #e3f5ec; --warn: #b25e09; --warn-bg: #fdf0dc;
  --bad: #c4320a; --bad-bg: #fde8e3; --info: #2457c5; --info-bg: #e6eeff; --neutral-bg: #eef0f4;
  --bar: #3b6fe0; --bar-q: #e39a2d; --bar-bg: #edf0f5;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0f141b; --card: #161d27; --fg: #e6eaf0; --muted: #9aa4b2; --faint: #6b7482;
    --line: #263041; --grid: #1f2835; --head: #1a2230;
    --ok: #4cc38a; --ok-bg: #16332a; --warn: #f0a74a; --warn-bg: #3a2a13;
    --bad: #ff7a5c; --bad-bg: #3d1d16; --info: #79a3ff; --info-bg: #1b2a4a; --neutral-bg: #222b38;
    --bar: #5b8cff; --bar-q: #f0a74a; --bar-bg: #232d3b;
  }
}
* { box-sizing: border-box; }
html, body { margin: 0; background: var(--bg); color: var(--fg); }
body { font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  font-variant-numeric: tabular-nums; }
header.top { display: flex; align-items: center; gap: 24px; padding: 12px 24px; background: var(--card);
  border-bottom: 1px solid var(--line); position: sticky; top: 0; z-index: 2; flex-wrap: wrap; }
.brand { font-weight: 700; font-size: 16px; letter-spacing: .2px; display: flex; align-items: center; gap: 8px; }
.brand .mark { width: 18px; height: 18px; border-radius: 5px; background: linear-gradient(135deg, #3b6fe0, #12a37a); }
.brand .sub { font-weight: 500; color: var(--muted); font-size: 13px; }
.kpis { display: flex; gap: 22px; flex: 1; flex-wrap: wrap; }
.kpi { display: flex; flex-direction: column; min-width: 70px; }
.kpi .v { font-size: 17px; font-weight: 650; }
.kpi .l { font-size: 11.5px; color: var(--muted); }
.kpi.bad .v { color: var(--bad); }
.conn { display: flex; align-items: center; gap: 8px; color: var(--muted); white-space: nowrap; }
.conn .state { font-weight: 600; color: var(--fg); }
.dot { width: 9px; height: 9px; border-radius: 50%; display: inline-block; background: var(--faint); flex: none; }
.dot.ok { background: var(--ok); box-shadow: 0 0 0 3px var(--ok-bg); }
.dot.warn { background: var(--warn); box-shadow: 0 0 0 3px var(--warn-bg); }
.dot.bad { background: var(--bad); box-shadow: 0 0 0 3px var(--bad-bg); }
main { padding: 18px 24px 32px; display: grid; gap: 16px; max-width: 1680px; margin: 0 auto; }
.banner { padding: 10px 14px; border-radius: 8px; background: var(--warn-bg); color: var(--warn); font-weight: 600; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; min-width: 0; }
.card h2 { margin: 0 0 10px; font-size: 13px; font-weight: 650; display: flex; align-items: baseline; gap: 8px; }
.card h2 .unit { font-weight: 400; color: var(--muted); font-size: 12px; }
.grid3 { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 16px; }
.grid2 { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 16px; }
@media (max-width: 1100px) { .grid3, .grid2 { grid-template-columns: minmax(0, 1fr); } }
/* The models table needs the whole width below 1700 px (its nine columns fit 1400 px that way). */
@media (max-width: 1700px) { .grid2 { grid-template-columns: minmax(0, 1fr); } }
.name { max-width: 240px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; display: inline-block; vertical-align: bottom; }
.scroll { overflow-x: auto; }
table { width: 100%; border-collapse: collapse; }
th { text-align: left; font-size: 11px; font-weight: 600; color: var(--muted); text-transform: uppercase;
  letter-spacing: .4px; padding: 6px 10px; background: var(--head); border-bottom: 1px solid var(--line); white-space: nowrap; }
td { padding: 7px 10px; border-bottom: 1px solid var(--line); vertical-align: middle; white-space: nowrap; }
tbody tr:last-child td { border-bottom: none; }
th.num, td.num { text-align: right; }
td.empty { color: var(--faint); text-align: center; padding: 18px; }
.mono { font-family: var(--mono); font-size: 12px; }
.muted { color: var(--muted); }
.faint { color: var(--faint); }
.sub { display: block; color: var(--muted); font-size: 11.5px; }
.chip { display: inline-block; padding: 1px 7px; margin: 1px 4px 1px 0; border-radius: 10px; background: var(--neutral-bg);
  font-size: 11.5px; font-family: var(--mono); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 11.5px; font-weight: 600; }
.badge.ok { background: var(--ok-bg); color: var(--ok); }
.badge.warn { background: var(--warn-bg); color: var(--warn); }
.badge.bad { background: var(--bad-bg); color: var(--bad); }
.badge.info { background: var(--info-bg); color: var(--info); }
.badge.neutral { background: var(--neutral-bg); color: var(--muted); }
.health { display: inline-flex; align-items: center; gap: 7px; }
.err { color: var(--bad); font-size: 11.5px; max-width: 280px; overflow: hidden; text-overflow: ellipsis; display: block; }
.load { display: flex; align-items: center; gap: 10px; min-width: 190px; }
.load .nums { min-width: 74px; text-align: right; font-family: var(--mono); font-size: 12px; }
.bar { position: relative; flex: 1; height: 8px; min-width: 100px; border-radius: 4px; background: var(--bar-bg); overflow: hidden; }
.bar span { position: absolute; top: 0; bottom: 0; }
.bar .in { left: 0; background: var(--bar); }
.bar .q { background: var(--bar-q); }
.bar.full .in { background: var(--bad); }
.plot svg { display: block; width: 100%; height: 170px; overflow: visible; }
.plot svg text { font-size: 10.5px; fill: var(--muted); }
.plot svg .gridline { stroke: var(--grid); stroke-width: 1; }
.plot svg .axis { stroke: var(--line); stroke-width: 1; }
.plot svg .nodata { font-size: 12px; fill: var(--faint); }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin-top: 8px; font-size: 12px; min-height: 18px; }
.legend .item { display: inline-flex; align-items: center; gap: 6px; }
.legend .sw { width: 14px; height: 0; border-top: 2.5px solid; display: inline-block; }
.legend .sw.dash { border-top-style: dashed; }
.legend .val { font-family: var(--mono); font-size: 11.5px; color: var(--muted); }
.fail-row { display: grid; grid-template-columns: 150px 1fr 44px 64px; align-items: center; gap: 10px; padding: 5px 0; }
.fail-row .name { font-family: var(--mono); font-size: 12px; }
.fail-row .n { text-align: right; font-weight: 600; }
.fail-row .w { text-align: right; color: var(--muted); font-size: 12px; }
.fail-row.zero .name, .fail-row.zero .n { color: var(--faint); font-weight: 400; }
.fail-row .bar .in { background: var(--bad); }
.fail-head { display: grid; grid-template-columns: 150px 1fr 44px 64px; gap: 10px; font-size: 11px; color: var(--muted);
  text-transform: uppercase; letter-spacing: .4px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
.fail-head span:nth-child(n+3) { text-align: right; }
.fail-series { margin-top: 10px; font-size: 12px; color: var(--muted); }
.fail-series .mono { color: var(--fg); }
.code { font-family: var(--mono); font-size: 12px; color: var(--bad); }
.status-ok { color: var(--ok); font-weight: 600; }
.status-warn { color: var(--warn); font-weight: 600; }
.status-bad { color: var(--bad); font-weight: 600; }
@keyframes flash { from { background: var(--info-bg); } to { background: transparent; } }
tr.fresh td { animation: flash 2.5s ease-out; }
tr.failed td { background: var(--bad-bg); background: color-mix(in srgb, var(--bad-bg) 55%, transparent); }
.recent-scroll { max-height: 640px; overflow: auto; }
.recent-scroll thead th { position: sticky; top: 0; z-index: 1; }
.rid { max-width: 210px; overflow: hidden; text-overflow: ellipsis; display: inline-block; vertical-align: bottom; }
</style>
</head>
<body>
<header class="top">
  <div class="brand"><span class="mark"></span>sluice <span class="sub">gateway dashboard</span></div>
  <div class="kpis" id="kpis"></div>
  <div class="conn"><span class="dot" id="conn-dot"></span><span class="state" id="conn-state">connecting</span><span id="conn-age"></span></div>
</header>
<main>
  <div class="banner" id="draining" hidden>The gateway is draining: new requests are refused while streams in flight finish.</div>
  <div class="banner" id="process" hidden></div>
  <section class="card">
    <h2>Workers <span class="unit" id="workers-sub"></span></h2>
    <div class="scroll"><table id="workers">
      <thead><tr><th>Worker</th><th>Models</th><th>Health</th><th>Circuit</th><th>Load <span class="faint">in-flight / queued / max</span></th><th>Routed by</th></tr></thead>
      <tbody></tbody>
    </table></div>
  </section>
  <section class="grid3">
    <div class="card plot"><h2>Request rate <span class="unit" id="unit-rps">req/s</span></h2><svg id="plot-rps" role="img" aria-label="Requests per second"></svg><div class="legend" id="legend-rps"></div></div>
    <div class="card plot"><h2>Time to first token <span class="unit" id="unit-ttft">ms · p50 solid, p95 dashed</span></h2><svg id="plot-ttft" role="img" aria-label="Time to first token"></svg><div class="legend" id="legend-ttft"></div></div>
    <div class="card plot"><h2>Inter-token latency <span class="unit" id="unit-itl">ms · p50 solid, p95 dashed</span></h2><svg id="plot-itl" role="img" aria-label="Inter-token latency"></svg><div class="legend" id="legend-itl"></div></div>
  </section>
  <section class="grid2">
    <div class="card">
      <h2>Models</h2>
      <div class="scroll"><table id="models">
        <thead><tr><th>Model</th><th class="num">Workers</th><th class="num">Req/s</th><th class="num">Requests</th><th class="num">5xx</th><th class="num">Stream fail</th><th class="num">TTFT p50</th><th class="num">TTFT p95</th><th class="num">ITL p50</th><th class="num">ITL p95</th></tr></thead>
        <tbody></tbody>
      </table></div>
    </div>
    <div class="card">
      <h2>Stream failures <span class="unit" id="fail-sub"></span></h2>
      <div id="failures"></div>
    </div>
  </section>
  <section class="card">
    <h2>Routing decisions <span class="unit" id="routing-sub"></span></h2>
    <div class="scroll"><table id="routing">
      <thead><tr><th>Time</th><th>Model</th><th>Worker</th><th>Decided by</th><th>Left out</th><th>Scores <span class="faint">best first</span></th></tr></thead>
      <tbody></tbody>
    </table></div>
  </section>
  <section class="card">
    <h2>Recent requests <span class="unit" id="recent-sub"></span></h2>
    <div class="scroll recent-scroll"><table id="recent">
      <thead><tr><th>Time</th><th>Request</th><th>Route</th><th>Model</th><th class="num">Status</th><th>Outcome</th><th>Error code</th><th>Worker</th><th class="num">Duration</th><th class="num">TTFT</th></tr></thead>
      <tbody></tbody>
    </table></div>
  </section>
</main>
<script>
`;

const PAGE_TAIL = `</script>
</body>
</html>
`;

/**
 * The browser script, bundled by esbuild from src/dashboard/client/ into one classic script
 * (the page's Content-Security-Policy allows inline script only, where a module cannot import
 * another by URL): `client.js` beside this module once built (`npm run build`), .tmp/ of the
 * checkout when the gateway runs from its sources (tsx, the tests' global setup writes it).
 */
const CLIENT_SCRIPT = import.meta.url.endsWith('.ts')
  ? new URL('../../.tmp/dashboard-client.js', import.meta.url)
  : new URL('./client.js', import.meta.url);

function clientScript(): string {
  let script: string;
  try {
    script = readFileSync(CLIENT_SCRIPT, 'utf8');
  } catch (err) {
    throw new Error(
      `the dashboard script is not built (${(err as Error).message}): run \`npm run build\` (or the tests, which bundle it for a run from the sources)`,
    );
  }
  // Inlined as it is: a `</script` inside it would end the page's script early.
  if (/<\/script/i.test(script)) throw new Error('the dashboard script contains "</script"');
  return script;
}

/** The page, its script inlined (the Content-Security-Policy allows inline script only). */
export const DASHBOARD_HTML = PAGE_HEAD + clientScript() + PAGE_TAIL;
