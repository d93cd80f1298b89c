import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { histogramQuantile, MetricsHistory, Ring, type Sample } from '../src/dashboard/history.js';
import type { DashboardSnapshot } from '../src/dashboard/snapshot.js';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, post, startGateway, startMocks } from './helpers/gateway.js';
import { CHROMIUM_PATH } from './helpers/services.js';

const FAILED_ID = 'dash-failed-stream';

let mocks: MockWorker[];
let gateway: Gateway;

const chat = (extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 6, ...extra }), headers);

async function data(): Promise<DashboardSnapshot> {
  const res = await fetch(`${gateway.url}/dashboard/data`);
  expect(res.status).toBe(200);
  return (await res.json()) as DashboardSnapshot;
}

/** Reads SSE `data:` payloads from an open response body until `count` arrived. */
async function readEvents(
  body: ReadableStream<Uint8Array>,
  count: number,
  onEvent: (json: DashboardSnapshot, at: number) => void | Promise<void> = () => {},
): Promise<Array<{ json: DashboardSnapshot; at: number }>> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const events: Array<{ json: DashboardSnapshot; at: number }> = [];
  let buffer = '';
  try {
    while (events.length < count) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end = buffer.indexOf('\n\n');
      while (end >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of block.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const event = { json: JSON.parse(line.slice(6)) as DashboardSnapshot, at: Date.now() };
          events.push(event);
          await onEvent(event.json, event.at);
        }
        end = buffer.indexOf('\n\n');
      }
    }
  } finally {
    reader.releaseLock();
  }
  return events;
}

beforeAll(async () => {
  mocks = await startMocks(2, { tokensPerSecond: 400 });
  gateway = await startGateway({ workers: mocks.map((m) => ({ url: m.url })) });
  for (let i = 0; i < 4; i++) expect((await chat()).status).toBe(200);
  for (let i = 0; i < 4; i++) expect((await chat({ stream: true })).status).toBe(200);
  const failed = await chat(
    { stream: true, max_tokens: 10 },
    { 'x-mock-fault': 'reset_after:2', 'x-request-id': FAILED_ID },
  );
  expect(failed.text).toContain('request_stream_closed');
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all((mocks ?? []).map((m) => m.close()));
});

describe('dashboard history', () => {
  it('computes quantiles from cumulative buckets as histogram_quantile does', () => {
    const bounds = [0.1, 0.2, 0.4];
    // 10 observations in (0, 0.1], 10 in (0.1, 0.2], none above.
    expect(histogramQuantile(bounds, [10, 20, 20, 20], 0.5)).toBeCloseTo(0.1);
    expect(histogramQuantile(bounds, [10, 20, 20, 20], 0.75)).toBeCloseTo(0.15);
    expect(histogramQuantile(bounds, [0, 0, 0, 4], 0.5)).toBe(0.4);
    expect(histogramQuantile(bounds, [0, 0, 0, 0], 0.5)).toBeNull();
  });

  it('a ring keeps the newest entries only', () => {
    const ring = new Ring<number>(3);
    for (let i = 1; i <= 5; i++) ring.push(i);
    expect(ring.toArray()).toEqual([3, 4, 5]);
    ring.dropWhile((n) => n < 5);
    expect(ring.toArray()).toEqual([5]);
  });

  it('derives rates and quantiles from deltas, is bounded, and restarts after a gap', () => {
    const history = new MetricsHistory({ rateWindowMs: 2_000, quantileWindowMs: 2_000, capacity: 5 });
    const bounds = [0.01, 0.1, 1];
    const sample = (t: number, requests: number, fast: number, slow: number): Sample => ({
      t,
      requests: new Map([['m', requests]]),
      errors: new Map(),
      ttft: new Map([['m', { bounds, counts: [fast, fast + slow, fast + slow, fast + slow] }]]),
      itl: new Map(),
      failures: new Map([['upstream_closed', 0]]),
    });
    expect(history.push(sample(0, 0, 0, 0)).models.get('m')?.rps).toBeNull();
    history.push(sample(1_000, 10, 0, 0));
    const p = history.push(sample(2_000, 20, 10, 0)).models.get('m')!;
    expect(p.rps).toBeCloseTo(10);
    expect(p.ttftP50Ms).toBeCloseTo(5);
    // Only slow observations in the last two seconds: the fast ones fell out of the window.
    history.push(sample(3_000, 20, 10, 10));
    const q = history.push(sample(4_000, 20, 10, 10)).models.get('m')!;
    expect(q.rps).toBe(0);
    expect(q.ttftP50Ms).toBeCloseTo(55);
    for (let t = 5_000; t <= 9_000; t += 1_000) history.push(sample(t, 20, 10, 10));
    expect(history.size).toBe(5);
    // The timer was stopped for a minute: no delta spans the pause.
    expect(history.push(sample(70_000, 100, 10, 10)).models.get('m')?.rps).toBeNull();
    expect(history.series().t.at(-1)).toBe(70_000);
  });
});

describe('dashboard over HTTP', () => {
  it('GET /dashboard is a self-contained page', async () => {
    const res = await fetch(`${gateway.url}/dashboard?key=secret`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.headers.get('content-security-policy')).toContain("default-src 'none'");
    const html = await res.text();
    expect(html).toContain('EventSource');
    expect(html).toMatch(/<svg/);
    // No external asset.
    expect(html).not.toMatch(/<(script|link|img)[^>]+(src|href)=/i);
  });

  it('GET /dashboard/data is the snapshot', async () => {
    const s = await data();
    expect(s.version).toBe(1);
    expect(typeof s.at).toBe('number');
    expect(s.workers).toHaveLength(2);
    for (const w of s.workers) {
      expect(w).toMatchObject({
        healthy: true,
        circuit: 'closed',
        models: ['mock-model'],
        inflight: 0,
        queued: 0,
      });
      expect(w.maxConcurrent).toBeGreaterThan(0);
      expect(mocks.map((m) => m.url.replace(/\/$/, ''))).toContain(w.url);
    }
    expect(s.gateway).toMatchObject({ workers: 2, healthyWorkers: 2, draining: false });
    const model = s.models.find((m) => m.model === 'mock-model')!;
    expect(model.requests).toBe(9);
    expect(model.streamFailures).toBe(1);
    expect(s.streamFailures.total).toBe(1);
    expect(s.streamFailures.byReason.find((r) => r.reason === 'upstream_closed')?.total).toBe(1);
    expect(s.streamFailures.bySeries).toEqual([
      { api: 'chat_completions', model: 'mock-model', reason: 'upstream_closed', count: 1 },
    ]);
    expect(s.recent.length).toBe(9);
    expect(s.recent[0]).toMatchObject({
      requestId: FAILED_ID,
      status: 200,
      outcome: 'failed',
      code: 'request_stream_closed',
      model: 'mock-model',
      route: 'chat_completions',
    });
    expect(s.recent[0]!.worker).toBeTruthy();
    expect(s.recent.every((r, i) => i === 0 || r.at <= s.recent[i - 1]!.at)).toBe(true);
    expect(s.series.t.length).toBeGreaterThanOrEqual(1);
    for (const m of s.series.models) {
      for (const column of [m.rps, m.ttftP50Ms, m.ttftP95Ms, m.itlP50Ms, m.itlP95Ms]) {
        expect(column).toHaveLength(s.series.t.length);
      }
    }
    expect(s.windows).toEqual({ rateS: 5, quantileS: 10, historyS: 300 });
  });

  it('GET /dashboard/events sends a snapshot at once, then one a second', async () => {
    const abort = new AbortController();
    const started = Date.now();
    const res = await fetch(`${gateway.url}/dashboard/events?key=secret`, { signal: abort.signal });
    try {
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      let sent = false;
      const events = await readEvents(res.body!, 3, async () => {
        if (sent) return;
        sent = true;
        // Traffic between two snapshots shows up in the next one as a rate and as quantiles.
        await Promise.all([chat({ stream: true }), chat({ stream: true }), chat()]);
      });
      const [first, second, third] = events;
      expect(first!.at - started).toBeLessThan(1_000);
      expect(first!.json.workers).toHaveLength(2);
      expect(second!.json.at).toBeGreaterThan(first!.json.at);
      expect(third!.json.at - second!.json.at).toBeGreaterThanOrEqual(700);
      expect(third!.json.at - second!.json.at).toBeLessThanOrEqual(1_800);
      const model = third!.json.models.find((m) => m.model === 'mock-model')!;
      expect(model.requests).toBe(12);
      expect(model.rps).toBeGreaterThan(0);
      expect(model.ttftP50Ms).toBeGreaterThan(0);
      expect(model.itlP50Ms).toBeGreaterThan(0);
    } finally {
      abort.abort();
    }
  });

  it('several dashboards share one snapshot per tick', async () => {
    const aborts = [new AbortController(), new AbortController()];
    try {
      const streams = await Promise.all(
        aborts.map((a) => fetch(`${gateway.url}/dashboard/events`, { signal: a.signal })),
      );
      const [a, b] = await Promise.all(streams.map((res) => readEvents(res.body!, 3)));
      // A tick's snapshot is built once and is the same for both.
      const byAt = new Map(a!.map((e) => [e.json.at, JSON.stringify(e.json)]));
      const shared = b!.filter((e) => byAt.has(e.json.at));
      expect(shared.length).toBeGreaterThanOrEqual(2);
      for (const e of shared) expect(JSON.stringify(e.json)).toBe(byAt.get(e.json.at));
    } finally {
      for (const a of aborts) a.abort();
    }
  });
});

describe('dashboard lifecycle', () => {
  it('closing the gateway ends the event streams at once, cleanly', async () => {
    const gw = await startGateway({ workers: mocks.map((m) => ({ url: m.url })) });
    const res = await fetch(`${gw.url}/dashboard/events`);
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('data: ')) text += new TextDecoder().decode((await reader.read()).value);
    const decoder = new TextDecoder();
    let after = '';
    let ending: 'done' | 'cut' | undefined;
    // Read on while the gateway closes: the stream must end by itself, not by our timeout.
    const reading = (async () => {
      try {
        for (;;) {
          const r = await reader.read();
          if (r.done) {
            ending = 'done';
            return;
          }
          after += decoder.decode(r.value, { stream: true });
        }
      } catch {
        ending = 'cut';
      }
    })();
    const started = Date.now();
    await gw.close();
    // Generous: a close that waited for a timeout (a shutdown grace, a keep-alive) takes seconds more.
    expect(Date.now() - started).toBeLessThan(5_000);
    await Promise.race([reading, new Promise((resolve) => setTimeout(resolve, 5_000))]);
    // The gateway ended the stream itself (its last chunk sent), before its connection went ...
    expect(ending).toBe('done');
    // ... and no snapshot arrived after the first one (the next tick was a second away).
    expect(after).not.toContain('data: ');
    await reader.cancel().catch(() => undefined);
  });
});

/**
 * Browser code (a string: this file is compiled without the DOM library): decodes a PNG, and
 * counts the pixels of a box that have (about) a CSS colour.
 */
const COUNT_PIXELS_OF_COLOR = `async ({ base64, box, color }) => {
  const image = new Image();
  image.src = 'data:image/png;base64,' + base64;
  await image.decode();
  const canvas = document.createElement('canvas');
  canvas.width = image.width;
  canvas.height = image.height;
  const context = canvas.getContext('2d');
  context.drawImage(image, 0, 0);
  const probe = document.createElement('canvas').getContext('2d');
  probe.fillStyle = color;
  probe.fillRect(0, 0, 1, 1);
  const [r, g, b] = probe.getImageData(0, 0, 1, 1).data;
  const pixels = context.getImageData(Math.round(box.x), Math.round(box.y), Math.round(box.width), Math.round(box.height)).data;
  let matching = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (Math.abs(pixels[i] - r) < 24 && Math.abs(pixels[i + 1] - g) < 24 && Math.abs(pixels[i + 2] - b) < 24) matching++;
  }
  return matching;
}`;

describe('dashboard in a browser', () => {
  let browser: Browser;
  let page: Page;
  let screenshotDir: string;
  const keepScreenshot = process.env.SLUICE_SCREENSHOT_DIR !== undefined;
  const problems: string[] = [];
  const requested: string[] = [];

  beforeAll(async () => {
    screenshotDir = process.env.SLUICE_SCREENSHOT_DIR ?? (await mkdtemp(join(tmpdir(), 'sluice-dashboard-')));
    browser = await chromium.launch({
      executablePath: CHROMIUM_PATH,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    page = await browser.newPage({ viewport: { width: 1480, height: 1000 } });
    page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
    page.on('console', (msg) => {
      if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
    });
    page.on('request', (request) => requested.push(request.url()));
  });

  afterAll(async () => {
    await browser?.close();
    if (!keepScreenshot && screenshotDir) await rm(screenshotDir, { recursive: true, force: true });
  });

  it('shows the workers and the failed stream, and updates live', async () => {
    let loads = 0;
    page.on('load', () => loads++);
    await page.goto(`${gateway.url}/dashboard?key=k%26y`);
    const healthy = page.locator('#workers tr[data-worker-id][data-healthy="true"]');
    await eventually(async () => (await healthy.count()) === 2, 5_000);
    const code = page.locator(`#recent tr[data-request-id="${FAILED_ID}"] td.code`);
    await code.waitFor({ timeout: 5_000 });
    expect(await code.textContent()).toBe('request_stream_closed');
    expect(await page.locator('#conn-state').textContent()).toBe('live');
    // The key is passed on to the event stream, encoded.
    expect(requested.some((url) => url.endsWith('/dashboard/events?key=k%26y'))).toBe(true);

    const rowsBefore = await page.locator('#recent tbody tr').count();
    expect((await chat({}, { 'x-request-id': 'dash-live-1' })).status).toBe(200);
    await page.locator('#recent tr[data-request-id="dash-live-1"]').waitFor({ timeout: 3_000 });
    expect(await page.locator('#recent tbody tr').count()).toBe(Math.min(50, rowsBefore + 1));
    // Updated in place, without a reload.
    expect(loads).toBe(1);
    expect(await page.locator('#recent tbody tr').first().getAttribute('data-request-id')).toBe(
      'dash-live-1',
    );
    expect(problems).toEqual([]);
  });

  it('falls back to polling /dashboard/data when the event stream fails', async () => {
    const other = await browser.newPage();
    // Only script errors count here: the browser logs the refused event stream as a console error.
    const errors: string[] = [];
    other.on('pageerror', (err) => errors.push(err.message));
    // An event stream that answers 503: EventSource gives up and the page polls.
    await other.route(
      (url) => url.pathname === '/dashboard/events',
      (route) => route.fulfill({ status: 503, body: 'unavailable' }),
    );
    const polled: string[] = [];
    other.on('request', (request) => {
      if (request.url().includes('/dashboard/data')) polled.push(request.url());
    });
    try {
      await other.goto(`${gateway.url}/dashboard?key=abc`);
      const healthy = other.locator('#workers tr[data-healthy="true"]');
      await eventually(async () => (await healthy.count()) === 2, 5_000);
      expect(await other.locator('#conn-state').textContent()).toBe('polling');
      await eventually(() => polled.length >= 2, 4_000);
      expect(polled.every((url) => url.endsWith('/dashboard/data?key=abc'))).toBe(true);
      expect(errors).toEqual([]);
    } finally {
      await other.close();
    }
  });

  it('screenshot', async () => {
    // A few seconds of traffic, so that the plots have something to show.
    const until = Date.now() + 4_000;
    let n = 0;
    while (Date.now() < until) {
      await Promise.all([
        chat({ stream: true, max_tokens: 4 + (n % 12) }),
        chat({ stream: true, max_tokens: 8 }),
        chat(),
      ]);
      n++;
      await new Promise((resolve) => setTimeout(resolve, 60));
    }
    // The plot draws the traffic: a request-rate series for the model, not the "no data" text.
    const series = page.locator('#plot-rps path[stroke]');
    await eventually(async () => (await series.count()) > 0, 5_000);
    const d = (await series.first().getAttribute('d')) ?? '';
    expect(d.match(/[ML]/g)?.length ?? 0).toBeGreaterThanOrEqual(2);
    expect(await page.locator('#plot-rps text.nodata').count()).toBe(0);
    expect(await page.locator('#legend-rps').textContent()).toContain('mock-model');
    const path = join(screenshotDir, 'dashboard.png');
    await page.screenshot({ path, fullPage: true });
    const png = await readFile(path);
    expect((await stat(path)).size).toBeGreaterThan(10_000);
    expect([...png.subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    // What the screenshot shows: the pixels of the plot area carry the series' stroke colour, and
    // the worker rows are on screen. The browser decodes the PNG it just took.
    const stroke = (await series.first().getAttribute('stroke'))!;
    const plotBox = (await page.locator('#plot-rps').boundingBox())!;
    const workerRows = page.locator('#workers tr[data-worker-id]');
    expect(await workerRows.count()).toBe(2);
    for (const row of await workerRows.all()) {
      expect(await row.isVisible()).toBe(true);
      expect(await row.textContent()).toMatch(/127\.0\.0\.1:\d+/);
    }
    const inspect = await browser.newPage();
    try {
      const args = JSON.stringify({ base64: png.toString('base64'), box: plotBox, color: stroke });
      const found = (await inspect.evaluate(`(${COUNT_PIXELS_OF_COLOR})(${args})`)) as number;
      // A drawn line is at least dozens of pixels of its colour.
      expect(found).toBeGreaterThan(30);
    } finally {
      await inspect.close();
    }
    expect(problems).toEqual([]);
  });
});
