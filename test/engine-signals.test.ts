import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import type { SluiceConfigInput } from '../src/config/schema.js';
import type { Gateway } from '../src/gateway.js';
import { parseSamples, readEngineSignals, type SignalsParse } from '../src/workers/engine-metric-names.js';
import type { EngineSignals, MetricNames, SignalsSnapshot } from '../src/workers/engine-signals.js';
import type { Worker } from '../src/workers/worker.js';
import { WorkerSignals } from '../src/workers/worker-signals.js';
import { eventually, metricOrZero, post, startGateway } from './helpers/gateway.js';
import {
  ENGINE_MODEL,
  LLAMACPP_METRICS,
  type MetricsAnswer,
  type MetricsEngine,
  SGLANG_METRICS,
  startMetricsEngine,
  VLLM_METRICS,
} from './helpers/metrics-engine.js';

/** Engine signals: every worker's /metrics read off the request path into one typed view. */

const read = (text: string, names: Exclude<MetricNames, 'none'> = 'auto'): SignalsParse =>
  readEngineSignals(parseSamples(text), names, 1_000);

function signalsOf(parse: SignalsParse): EngineSignals {
  if (!parse.ok) throw new Error(`expected signals, got ${parse.reason}: ${parse.message}`);
  return parse.signals;
}

const vllmLine = (name: string, value: string) =>
  `# TYPE ${name} gauge\n${name}{engine="0",model_name="m"} ${value}\n`;
const vllmWith = (waiting: string, running = '1.0', extra = '') =>
  vllmLine('vllm:num_requests_waiting', waiting) + vllmLine('vllm:num_requests_running', running) + extra;

describe('engine metric names', () => {
  it("reads vLLM's names: counts summed over its engines, KV-cache use averaged, prefix-cache counters, the latest LoRA adapters", () => {
    expect(signalsOf(read(VLLM_METRICS))).toEqual({
      waiting: 5,
      running: 5,
      kvCacheUsage: 0.375,
      prefixCacheHits: 10_000,
      prefixCacheQueries: 20_000,
      prefixCacheHitRate: undefined,
      lora: { running: ['sql-lora', 'chat-lora'], waiting: ['summ-lora'], max: 4 },
      scrapedAt: 1_000,
      source: 'vllm',
    });
  });

  it("reads vLLM's older names: gpu_cache_usage_perc, and prefix-cache counters written without _total", () => {
    const text =
      vllmWith('2.0', '3.0', vllmLine('vllm:gpu_cache_usage_perc', '0.9')) +
      '# TYPE vllm:gpu_prefix_cache_queries counter\nvllm:gpu_prefix_cache_queries{model_name="m"} 300\n' +
      '# TYPE vllm:gpu_prefix_cache_hits counter\nvllm:gpu_prefix_cache_hits{model_name="m"} 120\n';
    expect(signalsOf(read(text, 'vllm'))).toMatchObject({
      waiting: 2,
      running: 3,
      kvCacheUsage: 0.9,
      prefixCacheHits: 120,
      prefixCacheQueries: 300,
      lora: undefined,
      source: 'vllm',
    });
  });

  it("reads SGLang's names: queue, running, token usage, its hit rate, and cached out of prompt tokens over every cache source", () => {
    expect(signalsOf(read(SGLANG_METRICS))).toEqual({
      waiting: 2,
      running: 7,
      kvCacheUsage: 0.62,
      prefixCacheHits: 3_280,
      prefixCacheQueries: 8_000,
      prefixCacheHitRate: 0.41,
      lora: undefined,
      scrapedAt: 1_000,
      source: 'sglang',
    });
  });

  it('reads the batch an SGLang engine reports (sglang:max_running_requests); none from a vLLM', () => {
    const reported = `${SGLANG_METRICS}# TYPE sglang:max_running_requests gauge\nsglang:max_running_requests{model_name="m"} 48.0\n`;
    expect(signalsOf(read(reported)).batchSize).toBe(48);
    expect(signalsOf(read(SGLANG_METRICS)).batchSize).toBeUndefined();
    expect(signalsOf(read(VLLM_METRICS)).batchSize).toBeUndefined();
  });

  it("reads llama.cpp's names: deferred and processing requests, a KV-cache use only from builds that still export it", () => {
    expect(signalsOf(read(LLAMACPP_METRICS))).toEqual({
      waiting: 6,
      running: 3,
      kvCacheUsage: undefined,
      prefixCacheHits: undefined,
      prefixCacheQueries: undefined,
      prefixCacheHitRate: undefined,
      lora: undefined,
      scrapedAt: 1_000,
      source: 'llamacpp',
    });
    const older = `${LLAMACPP_METRICS}# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.25\n`;
    expect(signalsOf(read(older, 'llamacpp')).kvCacheUsage).toBe(0.25);
  });

  it('reads only the names a worker is configured with, and finds no engine in another exporter', () => {
    expect(read(VLLM_METRICS, 'sglang')).toMatchObject({ ok: false, reason: 'no_known_metrics' });
    const nodeExporter = '# TYPE node_load1 gauge\nnode_load1 0.42\nprocess_open_fds 12\n';
    expect(read(nodeExporter)).toMatchObject({ ok: false, reason: 'no_known_metrics' });
    expect(read(vllmLine('vllm:num_requests_running', '1'))).toMatchObject({
      ok: false,
      reason: 'no_known_metrics',
      message: expect.stringContaining('vllm:num_requests_waiting'),
    });
  });

  it('believes no value that lies: NaN, negative or absurd counts, a ratio past 1, more cache hits than queries', () => {
    const lies = [
      vllmWith('NaN'),
      vllmWith('-3.0'),
      vllmWith('1e12'),
      vllmWith('+Inf'),
      vllmWith('1.0', '2.0', vllmLine('vllm:kv_cache_usage_perc', '57.0')),
      vllmWith('1.0', '2.0', vllmLine('vllm:kv_cache_usage_perc', 'NaN')),
      vllmWith(
        '1.0',
        '2.0',
        'vllm:prefix_cache_queries_total{model_name="m"} 10\nvllm:prefix_cache_hits_total{model_name="m"} 11\n',
      ),
      vllmWith('1.0', '2.0', 'vllm:lora_requests_info{max_lora="many",running_lora_adapters=""} 1.7e9\n'),
    ];
    for (const text of lies) expect(read(text), text).toMatchObject({ ok: false, reason: 'invalid_values' });
  });

  it('keeps an SGLang hit rate of NaN (no query yet) as no rate, not as a lie', () => {
    const text = SGLANG_METRICS.replace(
      'cache_hit_rate{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.41',
      'cache_hit_rate{model_name="Qwen/Qwen2.5-7B-Instruct"} NaN',
    );
    expect(signalsOf(read(text)).prefixCacheHitRate).toBeUndefined();
  });
});

describe('signals settings', () => {
  it('default to a read every 250 ms, stale after three intervals but never before a read could time out, and every worker read with auto names at /metrics', () => {
    const config = parseConfig({ workers: [{ url: 'http://127.0.0.1:9' }] });
    expect(config.signals).toEqual({
      enabled: true,
      intervalMs: 250,
      timeoutMs: 1_000,
      // 3 × 250 ms would be sooner than a read allowed its whole second.
      staleMs: 1_250,
      maxBytes: 4 * 1024 * 1024,
      maxSampleBytes: 64 * 1024,
      missingRetryMs: 60_000,
      maxAdapters: 256,
      adapterExpiryMs: 60_000,
    });
    expect(parseConfig({ signals: { intervalMs: 5_000 } }).signals.staleMs).toBe(15_000);
    expect(parseConfig({ signals: { intervalMs: 100, timeoutMs: 50 } }).signals.staleMs).toBe(300);
    expect(
      parseConfig({ workers: [{ url: 'http://127.0.0.1:9', metrics: {} }] }).workers[0]!.metrics,
    ).toEqual({
      path: '/metrics',
      names: 'auto',
    });
  });

  it('refuse a staleMs not longer than the interval, and names no engine has', () => {
    expect(() => parseConfig({ signals: { intervalMs: 1_000, staleMs: 1_000 } })).toThrow(
      'signals.staleMs: signals.staleMs must be longer than signals.intervalMs',
    );
    expect(() =>
      parseConfig({ workers: [{ url: 'http://127.0.0.1:9', metrics: { names: 'tgi' } }] }),
    ).toThrow(/workers\.0\.metrics\.names/);
  });
});

describe('a worker reading over time', () => {
  const local = () => ({ waiting: 2, running: 3 });
  const reading = (signals: WorkerSignals, now: number) => signals.reading(local, now);
  const engine = (scrapedAt: number): EngineSignals => ({ ...signalsOf(read(VLLM_METRICS)), scrapedAt });

  it('is stale before the engine ever answered, fresh up to staleMs, then stale again: never idle', () => {
    const signals = new WorkerSignals('auto', '/metrics', { enabled: true, staleMs: 300 });
    expect(reading(signals, 10_000)).toEqual({
      state: 'stale',
      signals: undefined,
      ageMs: undefined,
      reason: 'not read yet',
    });
    signals.last = engine(10_000);
    expect(reading(signals, 10_300)).toMatchObject({
      state: 'fresh',
      ageMs: 300,
      signals: { source: 'vllm' },
    });
    signals.failure = '/metrics: no answer within 1000 ms';
    expect(reading(signals, 10_301)).toMatchObject({
      state: 'stale',
      ageMs: 301,
      reason: '/metrics: no answer within 1000 ms',
      signals: { waiting: 5 },
    });
  });

  it("is sluice's own counts while the worker has no usable /metrics, when signals are off, and for metrics.names none", () => {
    const missing = new WorkerSignals('auto', '/metrics', { enabled: true, staleMs: 300 });
    missing.missing = { reason: '/metrics answered HTTP 404', until: 70_000 };
    const own = { waiting: 2, running: 3, kvCacheUsage: undefined, source: 'none', scrapedAt: 10_000 };
    expect(reading(missing, 10_000)).toMatchObject({
      state: 'missing',
      signals: own,
      reason: '/metrics answered HTTP 404',
    });
    const off = new WorkerSignals('vllm', '/metrics', { enabled: false, staleMs: 300 });
    expect(reading(off, 10_000)).toMatchObject({ state: 'missing', signals: own });
    const none = new WorkerSignals('none', '/metrics', { enabled: true, staleMs: 300 });
    expect(none.scraped).toBe(false);
    expect(reading(none, 10_000)).toMatchObject({ state: 'missing', signals: own });
  });
});

describe('engine signals through a gateway', () => {
  const engines: MetricsEngine[] = [];
  const gateways: Gateway[] = [];
  afterEach(async () => {
    await Promise.all(gateways.splice(0).map((g) => g.close()));
    await Promise.all(engines.splice(0).map((e) => e.close()));
  });

  const engine = async (metrics: MetricsAnswer) => {
    const started = await startMetricsEngine(metrics);
    engines.push(started);
    return started;
  };
  const gateway = async (input: SluiceConfigInput) => {
    const started = await startGateway({
      ...input,
      signals: { intervalMs: 50, timeoutMs: 2_000, staleMs: 300, ...input.signals },
    });
    gateways.push(started);
    return started;
  };
  const workerOf = (g: Gateway, url: string): Worker => g.context.registry.list().find((w) => w.url === url)!;
  const chat = (g: Gateway, model = ENGINE_MODEL) =>
    post(`${g.url}/v1/chat/completions`, { model, messages: [{ role: 'user', content: 'hi' }] });

  it("turns a vLLM engine's /metrics into its worker's fresh signals, shown on the admin API and the dashboard", async () => {
    const vllm = await engine({ kind: 'text', body: VLLM_METRICS });
    const g = await gateway({ workers: [{ url: vllm.url, id: 'vllm-0' }] });
    const worker = workerOf(g, vllm.url);
    await eventually(() => worker.signals().state === 'fresh');
    expect(worker.signals().signals).toMatchObject({
      waiting: 5,
      running: 5,
      kvCacheUsage: 0.375,
      prefixCacheHits: 10_000,
      prefixCacheQueries: 20_000,
      lora: { running: ['sql-lora', 'chat-lora'], waiting: ['summ-lora'], max: 4 },
      source: 'vllm',
    });

    const admin = (await (await fetch(`${g.url}/admin/workers/vllm-0`)).json()) as {
      signals: SignalsSnapshot;
    };
    expect(admin.signals).toMatchObject({
      state: 'fresh',
      source: 'vllm',
      reason: null,
      waiting: 5,
      running: 5,
      kvCacheUsage: 0.375,
      lora: { running: ['sql-lora', 'chat-lora'], waiting: ['summ-lora'], max: 4 },
    });
    const dashboard = (await (await fetch(`${g.url}/dashboard/data`)).json()) as {
      workers: Array<{ id: string; signals: unknown }>;
    };
    expect(dashboard.workers.find((w) => w.id === 'vllm-0')!.signals).toEqual({
      state: 'fresh',
      source: 'vllm',
      waiting: 5,
      running: 5,
      kvCacheUsage: 0.375,
    });
  });

  it('reads an SGLang engine and a llama.cpp server with their own names, and follows what they report', async () => {
    const sglang = await engine({ kind: 'text', body: SGLANG_METRICS });
    const llama = await engine({ kind: 'text', body: LLAMACPP_METRICS });
    const g = await gateway({
      workers: [{ url: sglang.url }, { url: llama.url, metrics: { path: '/metrics', names: 'llamacpp' } }],
    });
    await eventually(() => workerOf(g, sglang.url).signals().state === 'fresh');
    await eventually(() => workerOf(g, llama.url).signals().state === 'fresh');
    expect(workerOf(g, sglang.url).signals().signals).toMatchObject({
      source: 'sglang',
      waiting: 2,
      running: 7,
    });
    expect(workerOf(g, llama.url).signals().signals).toMatchObject({
      source: 'llamacpp',
      waiting: 6,
      running: 3,
    });

    llama.metrics = {
      kind: 'text',
      body: LLAMACPP_METRICS.replace('llamacpp:requests_deferred 6', 'llamacpp:requests_deferred 11'),
    };
    await eventually(() => workerOf(g, llama.url).signals().signals?.waiting === 11);
  });

  it("falls back to sluice's own in-flight counts for a worker whose /metrics is 404, and does not ask it again for a while", async () => {
    const bare = await engine({ kind: 'status', status: 404 });
    const vllm = await engine({ kind: 'text', body: VLLM_METRICS });
    const g = await gateway({
      workers: [
        { url: bare.url, models: ['bare-model'] },
        { url: vllm.url, models: [ENGINE_MODEL] },
      ],
    });
    const worker = workerOf(g, bare.url);
    await eventually(() => worker.signals().state === 'missing');
    expect(worker.signals()).toMatchObject({
      state: 'missing',
      reason: '/metrics answered HTTP 404',
      signals: { source: 'none', waiting: 0, running: 0 },
    });

    bare.holdChats = true;
    const held = chat(g, 'bare-model');
    await eventually(() => worker.signals().signals?.running === 1);
    expect(worker.signals().signals).toMatchObject({ source: 'none', running: 1, kvCacheUsage: undefined });
    bare.holdChats = false;
    expect((await held).status).toBe(200);

    // While the vLLM worker is read over and over, the bare one is not asked again.
    const seen = vllm.stats.metricsRequests;
    await eventually(() => vllm.stats.metricsRequests >= seen + 5);
    expect(bare.stats.metricsRequests).toBe(1);
    const worker0 = worker.id;
    expect(
      await metricOrZero(g.url, 'sluice_worker_signal_scrape_failures_total', {
        worker: worker0,
        cause: 'not_found',
      }),
    ).toBe(1);
  });

  it('takes a /metrics that is not Prometheus text (an HTML page) as no metrics', async () => {
    const html = await engine({
      kind: 'text',
      body: '<html><body>Welcome</body></html>',
      contentType: 'text/html',
    });
    const g = await gateway({ workers: [{ url: html.url }] });
    await eventually(() => workerOf(g, html.url).signals().state === 'missing');
    expect(workerOf(g, html.url).signals()).toMatchObject({
      reason: expect.stringContaining('not Prometheus text'),
      signals: { source: 'none' },
    });
  });

  it('counts a worker whose /metrics stops answering as stale, with one read in flight, while its requests are still routed', async () => {
    const vllm = await engine({ kind: 'text', body: VLLM_METRICS });
    const g = await gateway({ workers: [{ url: vllm.url }], signals: { timeoutMs: 60_000 } });
    const worker = workerOf(g, vllm.url);
    await eventually(() => worker.signals().state === 'fresh');

    vllm.metrics = { kind: 'hang' };
    const before = vllm.stats.metricsRequests;
    await eventually(() => vllm.stats.metricsOpen === 1);
    for (let i = 0; i < 5; i++) {
      expect((await chat(g)).status).toBe(200);
      // Answered while the read of /metrics still hangs.
      expect(vllm.stats.metricsOpen).toBe(1);
    }
    await eventually(() => worker.signals().state === 'stale');
    expect(worker.signals()).toMatchObject({ state: 'stale', signals: { source: 'vllm', waiting: 5 } });
    expect((await chat(g)).status).toBe(200);
    // Past staleMs (several intervals), still the one read: none piles up behind it.
    expect(vllm.stats.metricsRequests).toBe(before + 1);
    expect(vllm.stats.metricsOpen).toBe(1);
  });

  it('reads a /metrics that times out as stale, counted as a timeout failure, and fresh again once it answers', async () => {
    const vllm = await engine({ kind: 'hang' });
    const g = await gateway({ workers: [{ url: vllm.url }], signals: { timeoutMs: 100 } });
    const worker = workerOf(g, vllm.url);
    expect(worker.signals()).toMatchObject({
      state: 'stale',
      signals: undefined,
      reason: '/metrics: no answer within 100 ms',
    });
    expect(
      await metricOrZero(g.url, 'sluice_worker_signal_scrape_failures_total', {
        worker: worker.id,
        cause: 'timeout',
      }),
    ).toBeGreaterThan(0);
    expect((await chat(g)).status).toBe(200);
    vllm.metrics = { kind: 'text', body: VLLM_METRICS };
    await eventually(() => worker.signals().state === 'fresh');
  });

  it("does not believe a /metrics that lies, falling back to sluice's own counts while requests are routed", async () => {
    const liar = await engine({ kind: 'text', body: vllmWith('-3.0', '2.0') });
    const g = await gateway({ workers: [{ url: liar.url }] });
    const worker = workerOf(g, liar.url);
    await eventually(() => worker.signals().state === 'missing');
    expect(worker.signals()).toMatchObject({
      reason: '/metrics: vllm:num_requests_waiting is -3, not a count of requests',
      signals: { source: 'none', waiting: 0 },
    });
    expect((await chat(g)).status).toBe(200);
    expect(
      await metricOrZero(g.url, 'sluice_worker_signal_scrape_failures_total', {
        worker: worker.id,
        cause: 'invalid_values',
      }),
    ).toBe(1);
  });

  it('cuts a /metrics that floods at maxBytes, never holding it, and routes requests meanwhile', async () => {
    for (const line of ['python_gc_objects_collected_total{generation="0"} 1.0\n', 'x'.repeat(1024)]) {
      const flood = await engine({ kind: 'flood', line });
      const g = await gateway({ workers: [{ url: flood.url }], signals: { maxBytes: 256 * 1024 } });
      const worker = workerOf(g, flood.url);
      await eventually(() => worker.signals().state === 'missing');
      expect(worker.signals()).toMatchObject({
        reason: `/metrics is larger than ${256 * 1024} bytes`,
        signals: { source: 'none' },
      });
      await eventually(() => flood.stats.metricsOpen === 0);
      expect(flood.stats.metricsRequests).toBe(1);
      expect((await chat(g)).status).toBe(200);
    }
  });

  it('reads no /metrics when signals are off, nor of a worker whose metrics.names is none', async () => {
    const a = await engine({ kind: 'text', body: VLLM_METRICS });
    const b = await engine({ kind: 'text', body: VLLM_METRICS });
    const c = await engine({ kind: 'text', body: VLLM_METRICS });
    const off = await gateway({ workers: [{ url: a.url }], signals: { enabled: false } });
    const none = await gateway({
      workers: [
        { url: b.url, models: ['b-model'], metrics: { path: '/metrics', names: 'none' } },
        { url: c.url, models: ['c-model'] },
      ],
    });
    // Several intervals pass: the other worker is read again and again meanwhile.
    await eventually(() => c.stats.metricsRequests >= 5);
    expect((await chat(off)).status).toBe(200);
    expect((await chat(none, 'b-model')).status).toBe(200);
    expect(workerOf(off, a.url).signals()).toMatchObject({ state: 'missing', signals: { source: 'none' } });
    expect(workerOf(none, b.url).signals()).toMatchObject({ state: 'missing', signals: { source: 'none' } });
    expect(a.stats.metricsRequests + b.stats.metricsRequests).toBe(0);
  });
});
