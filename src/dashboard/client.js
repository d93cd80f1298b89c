// @ts-check
/**
 * The dashboard page's script, run in the browser: reads the snapshot stream (SSE, falling back
 * to polling /dashboard/data), renders the tables and plots the series in SVG by hand. Plain
 * JavaScript checked by TypeScript (`tsconfig.dashboard.json`, DOM types) and linted like the
 * rest; the gateway inlines it into the page (src/dashboard/page.ts).
 */
(() => {
  var SVGNS = 'http://www.w3.org/2000/svg';
  var PALETTE = ['#3b6fe0', '#d6336c', '#12a37a', '#e08a1e', '#7c4ddb', '#0b93b5', '#c2410c', '#5f9e1d'];
  var params = new URLSearchParams(location.search);
  var key = params.get('key');
  var base = location.pathname.replace(/\/+$/, '');
  function withKey(path) {
    return key ? `${path}?key=${encodeURIComponent(key)}` : path;
  }
  var eventsUrl = withKey(`${base}/events`);
  var dataUrl = withKey(`${base}/data`);

  var last = null;
  var lastAt = 0;
  var seen = null;
  var colors = {};

  /**
   * @param {string} id
   * @returns {HTMLElement}
   */
  function $(id) {
    var node = document.getElementById(id);
    if (!node) throw new Error(`the page has no #${id}`);
    return node;
  }
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs)
      for (var k in attrs) {
        if (!Object.hasOwn(attrs, k) || attrs[k] === undefined || attrs[k] === null) continue;
        if (k === 'text') node.textContent = String(attrs[k]);
        else if (k === 'cls') node.className = attrs[k];
        else node.setAttribute(k, String(attrs[k]));
      }
    if (children)
      for (let i = 0; i < children.length; i++) {
        const c = children[i];
        if (c === null || c === undefined) continue;
        node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
      }
    return node;
  }
  function svg(tag, attrs) {
    var node = document.createElementNS(SVGNS, tag);
    for (var k in attrs)
      if (Object.hasOwn(attrs, k)) {
        if (k === 'text') node.textContent = String(attrs[k]);
        else node.setAttribute(k, String(attrs[k]));
      }
    return node;
  }
  function td(text, cls) {
    return el('td', { text: text, cls: cls });
  }
  function replaceRows(table, rows, columns, emptyText) {
    var body = table.tBodies[0];
    var frag = document.createDocumentFragment();
    if (rows.length === 0)
      frag.appendChild(el('tr', null, [el('td', { cls: 'empty', colspan: columns, text: emptyText })]));
    for (let i = 0; i < rows.length; i++) frag.appendChild(rows[i]);
    body.replaceChildren(frag);
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
    if (ms >= 10000) return `${(ms / 1000).toFixed(1)} s`;
    if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
    if (ms >= 100) return `${Math.round(ms)} ms`;
    if (ms >= 10) return `${ms.toFixed(1)} ms`;
    return `${ms.toFixed(2)} ms`;
  }
  function fmtRate(v) {
    if (v === null || v === undefined || !Number.isFinite(v)) return '–';
    if (v === 0) return '0';
    if (v >= 100) return Math.round(v).toString();
    if (v >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }
  function fmtCount(n) {
    return n >= 10000 ? `${(n / 1000).toFixed(1)}k` : String(n);
  }
  function fmtTime(ms) {
    var d = new Date(ms);
    function p(n) {
      return (n < 10 ? '0' : '') + n;
    }
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  function colorOf(model) {
    return colors[model] || '#667085';
  }

  function kpi(label, value, bad) {
    return el('div', { cls: `kpi${bad ? ' bad' : ''}` }, [
      el('span', { cls: 'v', text: value }),
      el('span', { cls: 'l', text: label }),
    ]);
  }

  function renderHeader(s) {
    var rps = 0,
      anyRate = false;
    for (let i = 0; i < s.models.length; i++)
      if (s.models[i].rps !== null) {
        rps += s.models[i].rps;
        anyRate = true;
      }
    var failWindow = 0;
    for (let j = 0; j < s.streamFailures.byReason.length; j++)
      failWindow += s.streamFailures.byReason[j].window;
    var g = s.gateway;
    $('kpis').replaceChildren(
      kpi('healthy workers', `${g.healthyWorkers} / ${g.workers}`, g.healthyWorkers < g.workers),
      kpi('req/s', anyRate ? fmtRate(rps) : '–'),
      kpi('in flight', String(g.inflight)),
      kpi('queued', String(g.queued), g.queued > 0),
      kpi(
        `stream failures, last ${windowLabel(s.streamFailures.windowS)}`,
        String(failWindow),
        failWindow > 0,
      ),
    );
    $('draining').hidden = !g.draining;
    var processBanner = $('process');
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
  function windowLabel(seconds) {
    if (seconds >= 90) return `${Math.round(seconds / 60)} min`;
    return `${Math.max(1, seconds)} s`;
  }

  function circuitBadge(state) {
    if (state === 'closed') return el('span', { cls: 'badge ok', text: 'closed' });
    if (state === 'half_open') return el('span', { cls: 'badge warn', text: 'half-open' });
    return el('span', { cls: 'badge bad', text: state });
  }

  function loadBar(w) {
    var max = Math.max(1, w.maxConcurrent);
    var total = Math.max(max, w.inflight + w.queued);
    var bar = el('div', {
      cls: `bar${w.inflight >= max ? ' full' : ''}`,
      title: `${Math.round(w.load * 100)}% of ${w.maxConcurrent} slots`,
    });
    var inPct = (w.inflight / total) * 100;
    var qPct = (w.queued / total) * 100;
    bar.appendChild(el('span', { cls: 'in', style: `width:${inPct.toFixed(2)}%` }));
    if (w.queued > 0)
      bar.appendChild(el('span', { cls: 'q', style: `left:${inPct.toFixed(2)}%;width:${qPct.toFixed(2)}%` }));
    return el('div', { cls: 'load' }, [
      bar,
      el('span', { cls: 'nums', text: `${w.inflight} / ${w.queued} / ${w.maxConcurrent}` }),
    ]);
  }

  function renderWorkers(s) {
    var rows = s.workers.map((w) => {
      var models = el(
        'td',
        null,
        w.models.length
          ? w.models.map((m) => el('span', { cls: 'chip name', text: m, title: m }))
          : [el('span', { cls: 'faint', text: 'none discovered' })],
      );
      var health = el('td', null, [
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
      ]);
    });
    replaceRows($('workers'), rows, 5, 'No worker registered.');
    $('workers-sub').textContent = s.workers.length + (s.workers.length === 1 ? ' worker' : ' workers');
  }

  function renderModels(s) {
    var counts = {};
    s.workers.forEach((w) => {
      w.models.forEach((m) => {
        if (!counts[m]) counts[m] = { all: 0, healthy: 0 };
        const c = counts[m];
        c.all++;
        if (w.healthy) c.healthy++;
      });
    });
    var rows = s.models.map((m) => {
      var c = counts[m.model] || { all: 0, healthy: 0 };
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
    replaceRows($('models'), rows, 10, 'No model yet.');
  }

  function renderFailures(s) {
    var f = s.streamFailures;
    var max = 1;
    f.byReason.forEach((r) => {
      if (r.total > max) max = r.total;
    });
    var box = document.createDocumentFragment();
    box.appendChild(
      el('div', { cls: 'fail-head' }, [
        el('span', { text: 'Reason' }),
        el('span'),
        el('span', { text: 'Total' }),
        el('span', { text: windowLabel(f.windowS) }),
      ]),
    );
    f.byReason.forEach((r) => {
      var bar = el('div', { cls: 'bar' }, [
        el('span', { cls: 'in', style: `width:${((r.total / max) * 100).toFixed(2)}%` }),
      ]);
      box.appendChild(
        el('div', { cls: `fail-row${r.total === 0 ? ' zero' : ''}`, 'data-reason': r.reason }, [
          el('span', { cls: 'name', text: r.reason }),
          bar,
          el('span', { cls: 'n', text: fmtCount(r.total) }),
          el('span', { cls: 'w', text: r.window > 0 ? `+${r.window}` : '–' }),
        ]),
      );
    });
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

  function outcomeBadge(outcome) {
    var cls =
      outcome === 'completed'
        ? 'ok'
        : outcome === 'failed' || outcome === 'error'
          ? 'bad'
          : outcome === 'client_gone'
            ? 'neutral'
            : 'warn';
    return el('span', { cls: `badge ${cls}`, text: outcome });
  }
  function statusClass(status) {
    return status >= 500 ? 'status-bad' : status >= 400 ? 'status-warn' : 'status-ok';
  }

  function renderRecent(s) {
    var first = seen === null;
    var now = {};
    var rows = s.recent.map((r) => {
      var rowKey = `${r.requestId}@${r.at}`;
      now[rowKey] = true;
      var tr = el(
        'tr',
        {
          'data-request-id': r.requestId,
          'data-outcome': r.outcome,
          cls:
            (!first && !seen[rowKey] ? 'fresh ' : '') +
              (r.outcome === 'failed' || r.status >= 500 ? 'failed' : '') || null,
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
      return tr;
    });
    seen = now;
    replaceRows($('recent'), rows, 10, 'No finished request yet.');
    $('recent-sub').textContent = s.recent.length ? `last ${s.recent.length}, newest first` : '';
  }

  // ---- plots ----------------------------------------------------------------------------------
  function niceStep(range, ticks) {
    var raw = range / ticks;
    var mag = 10 ** Math.floor(Math.log10(raw));
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
    svgEl.setAttribute('viewBox', `0 0 ${width} ${height}`);
    var nodes = [];
    var t1 = s.at;
    var t0 = t1 - s.windows.historyS * 1000;
    var ts = s.series.t;
    var ymax = 0;
    lines.forEach((line) => {
      line.values.forEach((v, i) => {
        if (v !== null && ts[i] >= t0 && v > ymax) ymax = v;
      });
    });
    var hasData = ymax > 0 || lines.some((line) => line.values.some((v) => v !== null));
    if (ymax <= 0) ymax = opts.minMax;
    var step = niceStep(ymax, 4);
    var top = Math.ceil((ymax * 1.05) / step) * step;
    function x(t) {
      return m.l + ((t - t0) / (t1 - t0)) * w;
    }
    function y(v) {
      return m.t + h - (v / top) * h;
    }
    for (let v = 0; v <= top + step / 2; v += step) {
      const yy = y(v).toFixed(1);
      nodes.push(svg('line', { x1: m.l, x2: m.l + w, y1: yy, y2: yy, class: v === 0 ? 'axis' : 'gridline' }));
      nodes.push(
        svg('text', { x: m.l - 6, y: (+yy + 3.5).toFixed(1), 'text-anchor': 'end', text: opts.tick(v) }),
      );
    }
    var minutes = Math.round(s.windows.historyS / 60);
    for (let k = 0; k <= minutes; k++) {
      const tx = x(t1 - (minutes - k) * 60000);
      nodes.push(
        svg('line', { x1: tx.toFixed(1), x2: tx.toFixed(1), y1: m.t, y2: m.t + h, class: 'gridline' }),
      );
      nodes.push(
        svg('text', {
          x: tx.toFixed(1),
          y: height - 6,
          'text-anchor': k === 0 ? 'start' : k === minutes ? 'end' : 'middle',
          text: k === minutes ? 'now' : `-${minutes - k} min`,
        }),
      );
    }
    var gap = s.intervalMs * 2.5;
    lines.forEach((line) => {
      var d = '';
      var run = 0;
      var runStart = null;
      var prevT = null;
      var lone = [];
      var endRun = () => {
        if (run === 1 && runStart) lone.push(runStart);
        run = 0;
      };
      for (let i = 0; i < ts.length; i++) {
        const val = line.values[i];
        const t = ts[i];
        if (t < t0 || val === null || val === undefined) {
          endRun();
          prevT = null;
          continue;
        }
        if (prevT !== null && t - prevT > gap) endRun();
        const px = x(t).toFixed(1),
          py = y(Math.min(val, top)).toFixed(1);
        d += `${(run === 0 ? 'M' : 'L') + px} ${py}`;
        if (run === 0) runStart = [px, py];
        run++;
        prevT = t;
      }
      endRun();
      var attrs = {
        d: d,
        fill: 'none',
        stroke: line.color,
        'stroke-width': line.dash ? 1.5 : 2,
        'stroke-linejoin': 'round',
        'stroke-linecap': 'round',
      };
      if (line.dash) attrs['stroke-dasharray'] = '4 3';
      if (d) nodes.push(svg('path', attrs));
      lone.forEach((p) => {
        nodes.push(svg('circle', { cx: p[0], cy: p[1], r: 2.2, fill: line.color }));
      });
    });
    if (!hasData)
      nodes.push(
        svg('text', {
          x: m.l + w / 2,
          y: m.t + h / 2,
          'text-anchor': 'middle',
          class: 'nodata',
          text: opts.empty,
        }),
      );
    svgEl.replaceChildren.apply(svgEl, nodes);
  }

  function _lastValue(values) {
    for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
    return null;
  }

  function legendItem(color, dash, label, value) {
    return el('span', { cls: 'item' }, [
      el('span', { cls: `sw${dash ? ' dash' : ''}`, style: `border-color:${color}` }),
      el('span', { text: label }),
      value ? el('span', { cls: 'val', text: value }) : null,
    ]);
  }

  function renderPlots(s) {
    var models = s.series.models;
    var rpsLines = [],
      ttftLines = [],
      itlLines = [];
    var rpsLegend = [],
      ttftLegend = [],
      itlLegend = [];
    models.forEach((sm) => {
      var c = colorOf(sm.model);
      rpsLines.push({ color: c, values: sm.rps });
      ttftLines.push({ color: c, values: sm.ttftP95Ms, dash: true }, { color: c, values: sm.ttftP50Ms });
      itlLines.push({ color: c, values: sm.itlP95Ms, dash: true }, { color: c, values: sm.itlP50Ms });
      var model = null;
      for (let i = 0; i < s.models.length; i++) if (s.models[i].model === sm.model) model = s.models[i];
      rpsLegend.push(legendItem(c, false, sm.model, model ? `${fmtRate(model.rps)} req/s` : ''));
      ttftLegend.push(
        legendItem(c, false, sm.model, model ? `${fmtMs(model.ttftP50Ms)} / ${fmtMs(model.ttftP95Ms)}` : ''),
      );
      itlLegend.push(
        legendItem(c, false, sm.model, model ? `${fmtMs(model.itlP50Ms)} / ${fmtMs(model.itlP95Ms)}` : ''),
      );
    });
    var msTick = (v) =>
      v >= 1000
        ? `${(v / 1000).toFixed(v % 1000 === 0 ? 0 : 1)} s`
        : `${v < 10 && v % 1 !== 0 ? v.toFixed(1) : Math.round(v)}`;
    drawPlot($('plot-rps'), s, rpsLines, {
      minMax: 1,
      tick: (v) => (v % 1 === 0 ? String(v) : v.toFixed(v < 1 ? 2 : 1)),
      empty: 'Collecting data…',
    });
    drawPlot($('plot-ttft'), s, ttftLines, {
      minMax: 10,
      tick: msTick,
      empty: 'No streaming request in the window',
    });
    drawPlot($('plot-itl'), s, itlLines, {
      minMax: 10,
      tick: msTick,
      empty: 'No streamed tokens in the window',
    });
    $('legend-rps').replaceChildren.apply($('legend-rps'), rpsLegend);
    $('legend-ttft').replaceChildren.apply($('legend-ttft'), ttftLegend);
    $('legend-itl').replaceChildren.apply($('legend-itl'), itlLegend);
    $('unit-rps').textContent = `req/s · ${s.windows.rateS} s average`;
    $('unit-ttft').textContent = `ms · p50 solid, p95 dashed · ${s.windows.quantileS} s window`;
    $('unit-itl').textContent = `ms · p50 solid, p95 dashed · ${s.windows.quantileS} s window`;
  }

  function assignColors(s) {
    var names = s.models.map((m) => m.model).concat(s.series.models.map((m) => m.model));
    names.sort();
    names.forEach((name) => {
      if (!Object.hasOwn(colors, name)) colors[name] = PALETTE[Object.keys(colors).length % PALETTE.length];
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
    try {
      s = JSON.parse(text);
    } catch (_e) {
      return;
    }
    if (s?.version !== 1) return;
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
    $('conn-dot').className =
      `dot ${state === 'live' ? 'ok' : state === 'polling' ? 'warn' : state === 'down' ? 'bad' : ''}`;
    $('conn-state').textContent = text;
  }

  function updateAge() {
    if (!lastAt) {
      $('conn-age').textContent = '';
      return;
    }
    var age = Math.round((Date.now() - lastAt) / 1000);
    $('conn-age').textContent = age <= 1 ? 'updated just now' : `updated ${age} s ago`;
  }

  function startSse() {
    if (typeof EventSource === 'undefined') {
      startPolling();
      return;
    }
    stopPolling();
    setConn('connecting', 'connecting');
    sseStartedAt = Date.now();
    lastMessageAt = 0;
    es = new EventSource(eventsUrl);
    es.onmessage = (event) => {
      lastMessageAt = Date.now();
      if (mode !== 'live') setConn('live', 'live');
      handle(event.data);
    };
    es.onerror = () => {
      if (!es) return;
      if (es.readyState === EventSource.CLOSED) {
        closeSse();
        startPolling();
      } else setConn('connecting', 'reconnecting');
    };
  }
  function closeSse() {
    if (es) {
      es.onmessage = null;
      es.onerror = null;
      es.close();
    }
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
    /** @type {Record<string, string>} */
    var headers = key ? { authorization: `Bearer ${key}` } : {};
    fetch(dataUrl, { headers: headers, cache: 'no-store' })
      .then((res) => {
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        return res.text();
      })
      .then(
        (text) => {
          pollFailures = 0;
          setConn('polling', 'polling');
          handle(text);
        },
        () => {
          pollFailures++;
          setConn('down', 'disconnected');
        },
      )
      .then(() => {
        if (pollTimer === null) return;
        // Every 30 s of polling, try the event stream again.
        if (pollFailures === 0 && Date.now() - pollSince > 30000) {
          stopPolling();
          startSse();
          return;
        }
        pollTimer = setTimeout(poll, pollFailures === 0 ? 1000 : Math.min(10000, 1000 * 2 ** pollFailures));
      });
  }

  // An event stream that delivers nothing for 5 s (a buffering proxy, a dead connection) is replaced by polling.
  setInterval(() => {
    updateAge();
    if (es && Date.now() - Math.max(lastMessageAt, sseStartedAt) > 5000) startPolling();
  }, 1000);

  window.addEventListener('resize', () => {
    if (last) renderPlots(last);
  });
  startSse();
})();
