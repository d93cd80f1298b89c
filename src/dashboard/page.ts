/**
 * The dashboard page: one self-contained HTML document (inline style and script, no external
 * asset), plotting by hand in SVG. It reads `key` from its own URL and passes it on to
 * `/dashboard/events` and `/dashboard/data`, since an EventSource cannot set headers. It listens
 * on SSE and falls back to polling the JSON snapshot when the event stream fails.
 *
 * Kept as a raw string: the script below uses no template literal and no backslash escapes that
 * the TypeScript string would change.
 */
export const DASHBOARD_HTML = String.raw`<!doctype html>
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
      <thead><tr><th>Worker</th><th>Models</th><th>Health</th><th>Circuit</th><th>Load <span class="faint">in-flight / queued / max</span></th></tr></thead>
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
    <h2>Recent requests <span class="unit" id="recent-sub"></span></h2>
    <div class="scroll recent-scroll"><table id="recent">
      <thead><tr><th>Time</th><th>Request</th><th>Route</th><th>Model</th><th class="num">Status</th><th>Outcome</th><th>Error code</th><th>Worker</th><th class="num">Duration</th><th class="num">TTFT</th></tr></thead>
      <tbody></tbody>
    </table></div>
  </section>
</main>
<script>
(function () {
  'use strict';
  var SVGNS = 'http://www.w3.org/2000/svg';
  var PALETTE = ['#3b6fe0', '#d6336c', '#12a37a', '#e08a1e', '#7c4ddb', '#0b93b5', '#c2410c', '#5f9e1d'];
  var params = new URLSearchParams(location.search);
  var key = params.get('key');
  var base = location.pathname.replace(/\/+$/, '');
  function withKey(path) { return key ? path + '?key=' + encodeURIComponent(key) : path; }
  var eventsUrl = withKey(base + '/events');
  var dataUrl = withKey(base + '/data');

  var last = null;
  var lastAt = 0;
  var seen = null;
  var colors = {};

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (!Object.prototype.hasOwnProperty.call(attrs, k) || attrs[k] === undefined || attrs[k] === null) continue;
      if (k === 'text') node.textContent = String(attrs[k]);
      else if (k === 'cls') node.className = attrs[k];
      else node.setAttribute(k, String(attrs[k]));
    }
    if (children) for (var i = 0; i < children.length; i++) {
      var c = children[i];
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return node;
  }
  function svg(tag, attrs) {
    var node = document.createElementNS(SVGNS, tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) {
      if (k === 'text') node.textContent = String(attrs[k]);
      else node.setAttribute(k, String(attrs[k]));
    }
    return node;
  }
  function td(text, cls) { return el('td', { text: text, cls: cls }); }
  function replaceRows(table, rows, columns, emptyText) {
    var body = table.tBodies[0];
    var frag = document.createDocumentFragment();
    if (rows.length === 0) frag.appendChild(el('tr', null, [el('td', { cls: 'empty', colspan: columns, text: emptyText })]));
    for (var i = 0; i < rows.length; i++) frag.appendChild(rows[i]);
    body.replaceChildren(frag);
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return '–';
    if (ms >= 10000) return (ms / 1000).toFixed(1) + ' s';
    if (ms >= 1000) return (ms / 1000).toFixed(2) + ' s';
    if (ms >= 100) return Math.round(ms) + ' ms';
    if (ms >= 10) return ms.toFixed(1) + ' ms';
    return ms.toFixed(2) + ' ms';
  }
  function fmtRate(v) {
    if (v === null || v === undefined || !isFinite(v)) return '–';
    if (v === 0) return '0';
    if (v >= 100) return Math.round(v).toString();
    if (v >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }
  function fmtCount(n) { return n >= 10000 ? (n / 1000).toFixed(1) + 'k' : String(n); }
  function fmtTime(ms) {
    var d = new Date(ms);
    function p(n) { return (n < 10 ? '0' : '') + n; }
    return p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
  }
  function colorOf(model) { return colors[model] || '#667085'; }

  function kpi(label, value, bad) {
    return el('div', { cls: 'kpi' + (bad ? ' bad' : '') }, [el('span', { cls: 'v', text: value }), el('span', { cls: 'l', text: label })]);
  }

  function renderHeader(s) {
    var rps = 0, anyRate = false;
    for (var i = 0; i < s.models.length; i++) if (s.models[i].rps !== null) { rps += s.models[i].rps; anyRate = true; }
    var failWindow = 0;
    for (var j = 0; j < s.streamFailures.byReason.length; j++) failWindow += s.streamFailures.byReason[j].window;
    var g = s.gateway;
    $('kpis').replaceChildren(
      kpi('healthy workers', g.healthyWorkers + ' / ' + g.workers, g.healthyWorkers < g.workers),
      kpi('req/s', anyRate ? fmtRate(rps) : '–'),
      kpi('in flight', String(g.inflight)),
      kpi('queued', String(g.queued), g.queued > 0),
      kpi('stream failures, last ' + windowLabel(s.streamFailures.windowS), String(failWindow), failWindow > 0)
    );
    $('draining').hidden = !g.draining;
    var processBanner = $('process');
    processBanner.hidden = !(g.processes > 1);
    if (g.processes > 1) {
      processBanner.textContent = 'This page shows gateway process ' + g.pid + ', one of ' + g.processes +
        ' sharing the port: each process routes, checks health and keeps its dashboard on its own, and a reload may show another. /metrics sums all of them.';
    }
  }
  function windowLabel(seconds) {
    if (seconds >= 90) return Math.round(seconds / 60) + ' min';
    return Math.max(1, seconds) + ' s';
  }

  function circuitBadge(state) {
    if (state === 'closed') return el('span', { cls: 'badge ok', text: 'closed' });
    if (state === 'half_open') return el('span', { cls: 'badge warn', text: 'half-open' });
    return el('span', { cls: 'badge bad', text: state });
  }

  function loadBar(w) {
    var max = Math.max(1, w.maxConcurrent);
    var total = Math.max(max, w.inflight + w.queued);
    var bar = el('div', { cls: 'bar' + (w.inflight >= max ? ' full' : ''), title: Math.round(w.load * 100) + '% of ' + w.maxConcurrent + ' slots' });
    var inPct = (w.inflight / total) * 100;
    var qPct = (w.queued / total) * 100;
    bar.appendChild(el('span', { cls: 'in', style: 'width:' + inPct.toFixed(2) + '%' }));
    if (w.queued > 0) bar.appendChild(el('span', { cls: 'q', style: 'left:' + inPct.toFixed(2) + '%;width:' + qPct.toFixed(2) + '%' }));
    return el('div', { cls: 'load' }, [bar, el('span', { cls: 'nums', text: w.inflight + ' / ' + w.queued + ' / ' + w.maxConcurrent })]);
  }

  function renderWorkers(s) {
    var rows = s.workers.map(function (w) {
      var models = el('td', null, w.models.length ? w.models.map(function (m) { return el('span', { cls: 'chip name', text: m, title: m }); }) : [el('span', { cls: 'faint', text: 'none discovered' })]);
      var health = el('td', null, [
        el('span', { cls: 'health' }, [el('span', { cls: 'dot ' + (w.healthy ? 'ok' : 'bad') }), el('span', { cls: 'health-text', text: w.healthy ? 'healthy' : 'unhealthy' })]),
        !w.healthy && w.lastError ? el('span', { cls: 'err', title: w.lastError.message, text: w.lastError.code }) : null,
      ]);
      return el('tr', { 'data-worker-id': w.id, 'data-healthy': String(w.healthy) }, [
        el('td', null, [el('strong', { text: w.id }), el('span', { cls: 'sub mono', text: w.url + (w.dpSize > 1 ? '  ·  dp ' + w.dpSize : '') })]),
        models,
        health,
        el('td', null, [circuitBadge(w.circuit)]),
        el('td', null, [loadBar(w)]),
      ]);
    });
    replaceRows($('workers'), rows, 5, 'No worker registered.');
    $('workers-sub').textContent = s.workers.length + (s.workers.length === 1 ? ' worker' : ' workers');
  }

  function renderModels(s) {
    var counts = {};
    s.workers.forEach(function (w) {
      w.models.forEach(function (m) {
        var c = counts[m] || (counts[m] = { all: 0, healthy: 0 });
        c.all++;
        if (w.healthy) c.healthy++;
      });
    });
    var rows = s.models.map(function (m) {
      var c = counts[m.model] || { all: 0, healthy: 0 };
      return el('tr', { 'data-model': m.model }, [
        el('td', null, [el('span', { cls: 'sw-dot', style: 'display:inline-block;width:8px;height:8px;border-radius:2px;margin-right:8px;background:' + colorOf(m.model) }), el('span', { cls: 'mono name', text: m.model, title: m.model })]),
        td(c.healthy + ' / ' + c.all, 'num' + (c.healthy === 0 && c.all > 0 ? ' status-bad' : '')),
        td(fmtRate(m.rps), 'num'),
        td(fmtCount(m.requests), 'num'),
        td(fmtCount(m.errors), 'num' + (m.errors > 0 ? ' status-bad' : ' faint')),
        td(fmtCount(m.streamFailures), 'num' + (m.streamFailures > 0 ? ' status-bad' : ' faint')),
        td(fmtMs(m.ttftP50Ms), 'num'),
        td(fmtMs(m.ttftP95Ms), 'num'),
        td(fmtMs(m.itlP50Ms), 'num'),
        td(fmtMs(m.itlP95Ms), 'num'),
      ]);
    });
    replaceRows($('models'), rows, 10, 'No model yet.');
  }

  function renderFailures(s) {
    var f = s.streamFailures;
    var max = 1;
    f.byReason.forEach(function (r) { if (r.total > max) max = r.total; });
    var box = document.createDocumentFragment();
    box.appendChild(el('div', { cls: 'fail-head' }, [el('span', { text: 'Reason' }), el('span'), el('span', { text: 'Total' }), el('span', { text: windowLabel(f.windowS) })]));
    f.byReason.forEach(function (r) {
      var bar = el('div', { cls: 'bar' }, [el('span', { cls: 'in', style: 'width:' + ((r.total / max) * 100).toFixed(2) + '%' })]);
      box.appendChild(el('div', { cls: 'fail-row' + (r.total === 0 ? ' zero' : ''), 'data-reason': r.reason }, [
        el('span', { cls: 'name', text: r.reason }), bar, el('span', { cls: 'n', text: fmtCount(r.total) }), el('span', { cls: 'w', text: r.window > 0 ? '+' + r.window : '–' }),
      ]));
    });
    if (f.bySeries.length > 0) {
      var list = el('div', { cls: 'fail-series' }, ['By API and model: ']);
      f.bySeries.slice(0, 8).forEach(function (x, i) {
        if (i > 0) list.appendChild(document.createTextNode(' · '));
        list.appendChild(el('span', { cls: 'mono', text: x.api + ' / ' + x.model + ' / ' + x.reason }));
        list.appendChild(document.createTextNode(' ' + x.count));
      });
      box.appendChild(list);
    }
    $('failures').replaceChildren(box);
    $('fail-sub').textContent = f.total + ' since start';
  }

  function outcomeBadge(outcome) {
    var cls = outcome === 'completed' ? 'ok' : outcome === 'failed' || outcome === 'error' ? 'bad' : outcome === 'client_gone' ? 'neutral' : 'warn';
    return el('span', { cls: 'badge ' + cls, text: outcome });
  }
  function statusClass(status) { return status >= 500 ? 'status-bad' : status >= 400 ? 'status-warn' : 'status-ok'; }

  function renderRecent(s) {
    var first = seen === null;
    var now = {};
    var rows = s.recent.map(function (r) {
      var rowKey = r.requestId + '@' + r.at;
      now[rowKey] = true;
      var tr = el('tr', { 'data-request-id': r.requestId, 'data-outcome': r.outcome, cls: (!first && !seen[rowKey] ? 'fresh ' : '') + (r.outcome === 'failed' || r.status >= 500 ? 'failed' : '') || null }, [
        td(fmtTime(r.at), 'mono muted'),
        el('td', null, [el('span', { cls: 'mono rid', title: r.requestId, text: r.requestId })]),
        td(r.route, 'mono'),
        el('td', null, [el('span', { cls: 'mono name', text: r.model, title: r.model })]),
        td(String(r.status), 'num ' + statusClass(r.status)),
        el('td', null, [outcomeBadge(r.outcome)]),
        r.code ? el('td', { cls: 'code', text: r.code }) : td('–', 'faint'),
        r.worker ? td(r.worker, 'mono') : td('–', 'faint'),
        td(fmtMs(r.durationMs), 'num'),
        td(fmtMs(r.ttftMs), 'num' + (r.ttftMs === undefined || r.ttftMs === null ? ' faint' : '')),
      ]);
      return tr;
    });
    seen = now;
    replaceRows($('recent'), rows, 10, 'No finished request yet.');
    $('recent-sub').textContent = s.recent.length ? 'last ' + s.recent.length + ', newest first' : '';
  }

  // ---- plots ----------------------------------------------------------------------------------
  function niceStep(range, ticks) {
    var raw = range / ticks;
    var mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var norm = raw / mag;
    var step = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10;
    return step * mag;
  }

  function drawPlot(svgEl, s, lines, opts) {
    var width = Math.max(200, Math.round(svgEl.getBoundingClientRect().width || 400));
    var height = 170;
    var m = { l: 46, r: 10, t: 8, b: 22 };
    var w = width - m.l - m.r;
    var h = height - m.t - m.b;
    svgEl.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
    var nodes = [];
    var t1 = s.at;
    var t0 = t1 - s.windows.historyS * 1000;
    var ts = s.series.t;
    var ymax = 0;
    lines.forEach(function (line) { line.values.forEach(function (v, i) { if (v !== null && ts[i] >= t0 && v > ymax) ymax = v; }); });
    var hasData = ymax > 0 || lines.some(function (line) { return line.values.some(function (v) { return v !== null; }); });
    if (ymax <= 0) ymax = opts.minMax;
    var step = niceStep(ymax, 4);
    var top = Math.ceil((ymax * 1.05) / step) * step;
    function x(t) { return m.l + ((t - t0) / (t1 - t0)) * w; }
    function y(v) { return m.t + h - (v / top) * h; }
    for (var v = 0; v <= top + step / 2; v += step) {
      var yy = y(v).toFixed(1);
      nodes.push(svg('line', { x1: m.l, x2: m.l + w, y1: yy, y2: yy, 'class': v === 0 ? 'axis' : 'gridline' }));
      nodes.push(svg('text', { x: m.l - 6, y: (+yy + 3.5).toFixed(1), 'text-anchor': 'end', text: opts.tick(v) }));
    }
    var minutes = Math.round(s.windows.historyS / 60);
    for (var k = 0; k <= minutes; k++) {
      var tx = x(t1 - (minutes - k) * 60000);
      nodes.push(svg('line', { x1: tx.toFixed(1), x2: tx.toFixed(1), y1: m.t, y2: m.t + h, 'class': 'gridline' }));
      nodes.push(svg('text', { x: tx.toFixed(1), y: height - 6, 'text-anchor': k === 0 ? 'start' : k === minutes ? 'end' : 'middle', text: k === minutes ? 'now' : '-' + (minutes - k) + ' min' }));
    }
    var gap = s.intervalMs * 2.5;
    lines.forEach(function (line) {
      var d = '';
      var run = 0;
      var runStart = null;
      var prevT = null;
      var lone = [];
      var endRun = function () { if (run === 1 && runStart) lone.push(runStart); run = 0; };
      for (var i = 0; i < ts.length; i++) {
        var val = line.values[i];
        var t = ts[i];
        if (t < t0 || val === null || val === undefined) { endRun(); prevT = null; continue; }
        if (prevT !== null && t - prevT > gap) endRun();
        var px = x(t).toFixed(1), py = y(Math.min(val, top)).toFixed(1);
        d += (run === 0 ? 'M' : 'L') + px + ' ' + py;
        if (run === 0) runStart = [px, py];
        run++;
        prevT = t;
      }
      endRun();
      var attrs = { d: d, fill: 'none', stroke: line.color, 'stroke-width': line.dash ? 1.5 : 2, 'stroke-linejoin': 'round', 'stroke-linecap': 'round' };
      if (line.dash) attrs['stroke-dasharray'] = '4 3';
      if (d) nodes.push(svg('path', attrs));
      lone.forEach(function (p) { nodes.push(svg('circle', { cx: p[0], cy: p[1], r: 2.2, fill: line.color })); });
    });
    if (!hasData) nodes.push(svg('text', { x: m.l + w / 2, y: m.t + h / 2, 'text-anchor': 'middle', 'class': 'nodata', text: opts.empty }));
    svgEl.replaceChildren.apply(svgEl, nodes);
  }

  function lastValue(values) {
    for (var i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
    return null;
  }

  function legendItem(color, dash, label, value) {
    return el('span', { cls: 'item' }, [el('span', { cls: 'sw' + (dash ? ' dash' : ''), style: 'border-color:' + color }), el('span', { text: label }), value ? el('span', { cls: 'val', text: value }) : null]);
  }

  function renderPlots(s) {
    var models = s.series.models;
    var rpsLines = [], ttftLines = [], itlLines = [];
    var rpsLegend = [], ttftLegend = [], itlLegend = [];
    models.forEach(function (sm) {
      var c = colorOf(sm.model);
      rpsLines.push({ color: c, values: sm.rps });
      ttftLines.push({ color: c, values: sm.ttftP95Ms, dash: true }, { color: c, values: sm.ttftP50Ms });
      itlLines.push({ color: c, values: sm.itlP95Ms, dash: true }, { color: c, values: sm.itlP50Ms });
      var model = null;
      for (var i = 0; i < s.models.length; i++) if (s.models[i].model === sm.model) model = s.models[i];
      rpsLegend.push(legendItem(c, false, sm.model, model ? fmtRate(model.rps) + ' req/s' : ''));
      ttftLegend.push(legendItem(c, false, sm.model, model ? fmtMs(model.ttftP50Ms) + ' / ' + fmtMs(model.ttftP95Ms) : ''));
      itlLegend.push(legendItem(c, false, sm.model, model ? fmtMs(model.itlP50Ms) + ' / ' + fmtMs(model.itlP95Ms) : ''));
    });
    var msTick = function (v) { return v >= 1000 ? (v / 1000).toFixed(v % 1000 === 0 ? 0 : 1) + ' s' : (v < 10 && v % 1 !== 0 ? v.toFixed(1) : Math.round(v)) + ''; };
    drawPlot($('plot-rps'), s, rpsLines, { minMax: 1, tick: function (v) { return v % 1 === 0 ? String(v) : v.toFixed(v < 1 ? 2 : 1); }, empty: 'Collecting data…' });
    drawPlot($('plot-ttft'), s, ttftLines, { minMax: 10, tick: msTick, empty: 'No streaming request in the window' });
    drawPlot($('plot-itl'), s, itlLines, { minMax: 10, tick: msTick, empty: 'No streamed tokens in the window' });
    $('legend-rps').replaceChildren.apply($('legend-rps'), rpsLegend);
    $('legend-ttft').replaceChildren.apply($('legend-ttft'), ttftLegend);
    $('legend-itl').replaceChildren.apply($('legend-itl'), itlLegend);
    $('unit-rps').textContent = 'req/s · ' + s.windows.rateS + ' s average';
    $('unit-ttft').textContent = 'ms · p50 solid, p95 dashed · ' + s.windows.quantileS + ' s window';
    $('unit-itl').textContent = 'ms · p50 solid, p95 dashed · ' + s.windows.quantileS + ' s window';
  }

  function assignColors(s) {
    var names = s.models.map(function (m) { return m.model; }).concat(s.series.models.map(function (m) { return m.model; }));
    names.sort();
    names.forEach(function (name) {
      if (!Object.prototype.hasOwnProperty.call(colors, name)) colors[name] = PALETTE[Object.keys(colors).length % PALETTE.length];
    });
  }

  function render(s) {
    last = s;
    lastAt = Date.now();
    assignColors(s);
    renderHeader(s);
    renderWorkers(s);
    renderModels(s);
    renderPlots(s);
    renderFailures(s);
    renderRecent(s);
    document.body.setAttribute('data-snapshot-at', String(s.at));
    updateAge();
  }

  function handle(text) {
    var s;
    try { s = JSON.parse(text); } catch (e) { return; }
    if (!s || s.version !== 1) return;
    render(s);
  }

  // ---- connection: SSE first, polling as the fallback -----------------------------------------
  var es = null;
  var mode = 'connecting';
  var sseStartedAt = 0;
  var lastMessageAt = 0;
  var pollTimer = null;
  var pollSince = 0;
  var pollFailures = 0;

  function setConn(state, text) {
    mode = state;
    $('conn-dot').className = 'dot ' + (state === 'live' ? 'ok' : state === 'polling' ? 'warn' : state === 'down' ? 'bad' : '');
    $('conn-state').textContent = text;
  }

  function updateAge() {
    if (!lastAt) { $('conn-age').textContent = ''; return; }
    var age = Math.round((Date.now() - lastAt) / 1000);
    $('conn-age').textContent = age <= 1 ? 'updated just now' : 'updated ' + age + ' s ago';
  }

  function startSse() {
    if (typeof EventSource === 'undefined') { startPolling(); return; }
    stopPolling();
    setConn('connecting', 'connecting');
    sseStartedAt = Date.now();
    lastMessageAt = 0;
    es = new EventSource(eventsUrl);
    es.onmessage = function (event) {
      lastMessageAt = Date.now();
      if (mode !== 'live') setConn('live', 'live');
      handle(event.data);
    };
    es.onerror = function () {
      if (!es) return;
      if (es.readyState === EventSource.CLOSED) { closeSse(); startPolling(); }
      else setConn('connecting', 'reconnecting');
    };
  }
  function closeSse() {
    if (es) { es.onmessage = null; es.onerror = null; es.close(); }
    es = null;
  }

  function startPolling() {
    closeSse();
    if (pollTimer !== null) return;
    pollSince = Date.now();
    pollFailures = 0;
    setConn('polling', 'polling');
    poll();
  }
  function stopPolling() {
    if (pollTimer !== null) clearTimeout(pollTimer);
    pollTimer = null;
  }
  function poll() {
    pollTimer = -1;
    var headers = key ? { authorization: 'Bearer ' + key } : {};
    fetch(dataUrl, { headers: headers, cache: 'no-store' }).then(function (res) {
      if (!res.ok) throw new Error('HTTP ' + res.status);
      return res.text();
    }).then(function (text) {
      pollFailures = 0;
      setConn('polling', 'polling');
      handle(text);
    }, function () {
      pollFailures++;
      setConn('down', 'disconnected');
    }).then(function () {
      if (pollTimer === null) return;
      // Every 30 s of polling, try the event stream again.
      if (pollFailures === 0 && Date.now() - pollSince > 30000) { stopPolling(); startSse(); return; }
      pollTimer = setTimeout(poll, pollFailures === 0 ? 1000 : Math.min(10000, 1000 * Math.pow(2, pollFailures)));
    });
  }

  // An event stream that delivers nothing for 5 s (a buffering proxy, a dead connection) is replaced by polling.
  setInterval(function () {
    updateAge();
    if (es && Date.now() - Math.max(lastMessageAt, sseStartedAt) > 5000) startPolling();
  }, 1000);

  window.addEventListener('resize', function () { if (last) renderPlots(last); });
  startSse();
})();
</script>
</body>
</html>
`;
