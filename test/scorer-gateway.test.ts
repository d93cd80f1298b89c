import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { SluiceConfigInput } from '../src/config/schema.js';
import type { Gateway } from '../src/gateway.js';
import { eventually, metricOrZero, perTest, post } from './helpers/gateway.js';
import { ENGINE_MODEL, type MetricsEngine, startMetricsEngine } from './helpers/metrics-engine.js';

/** A vLLM `/metrics` body: requests waiting and running, KV-cache use, LoRA adapters. */
function vllm(
  waiting: number,
  kv: number,
  lora?: { running: string[]; waiting?: string[]; max: number },
  running = 0,
): { kind: 'text'; body: string } {
  const lines = [
    '# TYPE vllm:num_requests_running gauge',
    `vllm:num_requests_running{engine="0",model_name="m"} ${running}.0`,
    '# TYPE vllm:num_requests_waiting gauge',
    `vllm:num_requests_waiting{engine="0",model_name="m"} ${waiting}.0`,
    '# TYPE vllm:kv_cache_usage_perc gauge',
    `vllm:kv_cache_usage_perc{engine="0",model_name="m"} ${kv}`,
  ];
  if (lora) {
    lines.push(
      '# TYPE vllm:lora_requests_info gauge',
      `vllm:lora_requests_info{max_lora="${lora.max}",running_lora_adapters="${lora.running.join(',')}",waiting_lora_adapters="${(lora.waiting ?? []).join(',')}"} 1.7e+09`,
    );
  }
  return { kind: 'text', body: `${lines.join('\n')}\n` };
}

const engines: MetricsEngine[] = [];
afterEach(async () => {
  for (const engine of engines.splice(0)) {
    engine.holdChats = false;
    await engine.close();
  }
});

async function engine(...args: Parameters<typeof startMetricsEngine>): Promise<MetricsEngine> {
  const started = await startMetricsEngine(...args);
  engines.push(started);
  return started;
}

const ask = (model = ENGINE_MODEL, content = 'hi') => ({
  model,
  max_tokens: 1,
  messages: [{ role: 'user', content }],
});

async function servedBy(gw: Gateway, body: unknown, headers: Record<string, string> = {}): Promise<string> {
  const res = await post(`${gw.url}/v1/chat/completions`, body, headers);
  expect(res.status, res.text).toBe(200);
  return res.headers.get('x-sluice-worker')!;
}

/** Waits until the gateway has read every engine's /metrics as `check` wants. */
async function readingsSay(gw: Gateway, check: (id: string, waiting: number | undefined) => boolean) {
  await eventually(() =>
    gw.context.registry.list().every((w) => {
      const reading = w.signals();
      return check(w.id, reading.state === 'fresh' ? reading.signals.waiting : undefined);
    }),
  );
}

describe('the scorer policy in the gateway', () => {
  const fx = perTest();

  it('sends requests by the engines’ signals: fewest waiting and most KV cache free, never a saturated or stale one', async () => {
    const [a, b, c] = await Promise.all([engine(vllm(3, 0.7)), engine(vllm(0, 0.1)), engine(vllm(1, 0.3))]);
    const gw = await fx.gateway({
      workers: [
        { url: a!.url, id: 'a' },
        { url: b!.url, id: 'b' },
        { url: c!.url, id: 'c' },
      ],
      routing: { policy: 'scorer' },
      signals: { intervalMs: 50, staleMs: 400, timeoutMs: 200 },
    });
    for (let i = 0; i < 5; i++) expect(await servedBy(gw, ask())).toBe('b');
    // b saturated (9 waiting), c the best of the others.
    b!.metrics = vllm(9, 0.1);
    c!.metrics = vllm(0, 0.05);
    await readingsSay(gw, (id, waiting) => (id === 'b' ? waiting === 9 : id === 'c' ? waiting === 0 : true));
    for (let i = 0; i < 5; i++) expect(await servedBy(gw, ask())).toBe('c');
    expect(gw.context.router.explanation(ENGINE_MODEL)?.filtered.saturated).toBe(1);
    // c's /metrics stops answering: its last reading (the best) goes stale, and stale is saturated.
    c!.metrics = { kind: 'hang' };
    await eventually(() => gw.context.registry.get('c')!.signals().state === 'stale');
    for (let i = 0; i < 5; i++) expect(await servedBy(gw, ask())).toBe('a');
  });

  it('explains each decision: the routing span says which scorer won and the scores, the dashboard counts wins', async () => {
    const collector = await otlpCollector();
    const [a, b] = await Promise.all([engine(vllm(4, 0.3)), engine(vllm(0, 0.3))]);
    const gw = await fx.gateway({
      workers: [
        { url: a!.url, id: 'a' },
        { url: b!.url, id: 'b' },
      ],
      routing: { policy: 'scorer' },
      signals: { intervalMs: 50 },
      tracing: { enabled: true, endpoint: collector.url, batchDelayMs: 20 },
    });
    expect(await servedBy(gw, ask())).toBe('b');
    await eventually(() => collector.spans().some((s) => s.name === 'routing'));
    const routing = collector.spans().find((s) => s.name === 'routing')!;
    expect(routing.attributes['sluice.routing.policy']).toBe('scorer');
    expect(routing.attributes['sluice.routing.decided_by']).toBe('queue');
    const scores = JSON.parse(String(routing.attributes['sluice.routing.scores'])) as {
      id: string;
      total: number;
      by: Record<string, number>;
    }[];
    expect(scores.map((s) => s.id)).toEqual(['b', 'a']);
    expect(scores[0]!.by.queue).toBeGreaterThan(scores[1]!.by.queue!);
    expect(routing.attributes['sluice.routing.filtered.saturated']).toBe(0);
    await collector.close();

    expect(await servedBy(gw, ask())).toBe('b');
    const data = (await (await fetch(`${gw.url}/dashboard/data`)).json()) as {
      workers: { id: string; routedBy: Record<string, number> }[];
      routing: { last: { worker: string; decidedBy: string }[] };
    };
    expect(data.workers.find((w) => w.id === 'b')!.routedBy).toEqual({ queue: 2 });
    expect(data.workers.find((w) => w.id === 'a')!.routedBy).toEqual({});
    expect(data.routing.last.map((d) => [d.worker, d.decidedBy])).toEqual([
      ['b', 'queue'],
      ['b', 'queue'],
    ]);
    expect(
      await metricOrZero(gw.url, 'sluice_routing_decisions_total', { worker: 'b', decided_by: 'queue' }),
    ).toBe(2);
  });

  it('routes a LoRA adapter to the engines that have it loaded, then to those with a free adapter slot', async () => {
    const listed = {
      models: [
        { id: 'llama', parent: null },
        { id: 'sql-lora', parent: 'llama' },
      ],
    };
    const [loaded, full, free] = await Promise.all([
      engine(vllm(2, 0.5, { running: ['sql-lora'], max: 2 }), listed),
      engine(vllm(0, 0.1, { running: ['x', 'y'], max: 2 }), listed),
      engine(vllm(1, 0.4, { running: ['x'], max: 2 }), listed),
    ]);
    const only = await engine(vllm(0, 0, { running: [], max: 1 }), {
      models: [
        { id: 'llama', parent: null },
        { id: 'chat-lora', parent: 'llama' },
      ],
    });
    // An engine that lists the base model only, but whose signals show an adapter running.
    const dynamic = await engine(vllm(0, 0, { running: ['new-lora'], max: 4 }), {
      models: [{ id: 'llama', parent: null }],
    });
    const gw = await fx.gateway({
      workers: [
        { url: loaded!.url, id: 'loaded' },
        { url: full!.url, id: 'full' },
        { url: free!.url, id: 'free' },
        { url: only.url, id: 'only' },
        { url: dynamic.url, id: 'dynamic' },
      ],
      routing: { policy: 'scorer' },
      signals: { intervalMs: 50 },
    });
    await eventually(() => gw.context.registry.get('dynamic')!.serves('new-lora'));
    expect(gw.context.registry.get('loaded')!.adapters.get('sql-lora')).toBe('llama');
    const admin = (await (await fetch(`${gw.url}/admin/workers`)).json()) as {
      data: { id: string; adapters: Record<string, string> }[];
    };
    expect(admin.data.find((w) => w.id === 'dynamic')!.adapters).toEqual({ 'new-lora': '' });
    expect(admin.data.find((w) => w.id === 'loaded')!.adapters).toEqual({ 'sql-lora': 'llama' });
    // Loaded first, though its engine has more waiting than the others.
    for (let i = 0; i < 4; i++) expect(await servedBy(gw, ask('sql-lora'))).toBe('loaded');
    // Nowhere loaded: the engine with a free slot, not the idle one whose slots are all taken.
    loaded!.metrics = vllm(0, 0.1, { running: ['z', 'w'], max: 2 });
    await eventually(
      () =>
        (gw.context.registry.get('loaded')!.signals().signals?.lora?.running ?? []).includes('z') ?? false,
    );
    for (let i = 0; i < 4; i++) expect(await servedBy(gw, ask('sql-lora'))).toBe('free');
    expect(gw.context.router.explanation('sql-lora')?.filtered.lora).toBe(2);
    // Only the engines that list an adapter (or run it) get it; the base model goes anywhere.
    expect(await servedBy(gw, ask('chat-lora'))).toBe('only');
    expect(await servedBy(gw, ask('new-lora'))).toBe('dynamic');
    const bases = new Set<string>();
    for (let i = 0; i < 20; i++) bases.add(await servedBy(gw, ask('llama')));
    expect(bases.size).toBeGreaterThan(1);
  });
});

/**
 * Flow control with one engine that takes one request at a time: its one reading says a batch of
 * one runs and one request waits (maxWaiting 2: one more may wait), so each request the gateway
 * sends makes it saturated until that request ends.
 */
describe('flow control in the gateway', () => {
  const fx = perTest();
  const saturatedFleet = (url: string, extra: SluiceConfigInput = {}): SluiceConfigInput => ({
    workers: [{ url, id: 'e' }],
    routing: { policy: 'scorer', scorer: { saturation: { maxWaiting: 2 } } },
    // Read once at start: what the gateway sends decides saturation from then on.
    signals: { intervalMs: 60_000 },
    ...extra,
  });
  const ADMIN = 'flow-admin-key-0123456789';

  it('lets waiting requests go by priority class, fair between keys within a class', async () => {
    const e = await engine(vllm(1, 0.1, undefined, 1));
    const gw = await fx.gateway(
      saturatedFleet(e.url, {
        auth: { adminKey: ADMIN },
        flow: { keys: { vip: { priority: 'high' }, batch: { priority: 'low' } } },
      }),
    );
    const keys: Record<string, string> = {};
    for (const name of ['blocker', 'hot', 'a', 'b', 'vip', 'batch']) {
      const created = await post(`${gw.url}/admin/keys`, { name }, { authorization: `Bearer ${ADMIN}` });
      keys[name] = (created.json() as { key: string }).key;
    }
    await gw.context.access.refresh();
    e.holdChats = true;
    const send = (key: string, id: string, headers: Record<string, string> = {}) =>
      post(`${gw.url}/v1/chat/completions`, ask(), {
        authorization: `Bearer ${keys[key]}`,
        'x-request-id': id,
        ...headers,
      });
    const blocker = send('blocker', 'blocker');
    await eventually(() => e.stats.requestIds.length === 1);
    const waiting: Promise<unknown>[] = [];
    const queue = async (key: string, id: string, headers?: Record<string, string>) => {
      waiting.push(send(key, id, headers));
      await eventually(() => gw.flow!.waiting(ENGINE_MODEL) === waiting.length);
    };
    for (let i = 1; i <= 4; i++) await queue('hot', `hot-${i}`);
    await queue('a', 'a-1', { 'x-sluice-priority': 'high' }); // a normal key cannot raise itself
    await queue('b', 'b-1');
    await queue('batch', 'batch-1');
    await queue('vip', 'vip-1', { 'x-sluice-priority': 'low' }); // but a key can lower itself
    await queue('vip', 'vip-2');
    e.holdChats = false;
    await Promise.all([blocker, ...waiting]);
    expect(e.stats.requestIds).toEqual([
      'blocker',
      'vip-2',
      'hot-1',
      'a-1',
      'b-1',
      'hot-2',
      'hot-3',
      'hot-4',
      'batch-1',
      'vip-1',
    ]);
  });

  it('holds a heavy tenant’s prompt in the gateway while every worker has a prompt pending, and lets the others’ go', async () => {
    // Streams (pending prefill counts streams) held at their engines: no first token yet.
    const long = 'Summarize this document, paragraph by paragraph. '.repeat(80);
    const heavyRun = async (isolate: boolean) => {
      const [a, b] = await Promise.all([engine(vllm(0, 0.1)), engine(vllm(0, 0.1))]);
      const gw = await fx.gateway({
        workers: [
          { url: a!.url, id: 'a' },
          { url: b!.url, id: 'b' },
        ],
        routing: { policy: 'scorer', scorer: { heavy: { isolate } } },
        flow: { tenantHeader: 'x-tenant-id', heavyShare: 1 },
        signals: { intervalMs: 50 },
      });
      await readingsSay(gw, (_id, waiting) => waiting === 0);
      a!.holdChats = true;
      b!.holdChats = true;
      const sent = () => a!.stats.requestIds.length + b!.stats.requestIds.length;
      const stream = (tenant: string, id: string, content: string) =>
        post(
          `${gw.url}/v1/chat/completions`,
          { ...ask(ENGINE_MODEL, content), stream: true },
          { 'x-tenant-id': tenant, 'x-request-id': id },
        );
      const all = [stream('small', 'small-1', 'a short question')];
      await eventually(() => sent() === 1);
      // Two of the hot tenant's, not yet heavy (1 in flight is not more than small's 1).
      all.push(stream('hot', 'hot-1', long));
      await eventually(() => sent() === 2);
      all.push(stream('hot', 'hot-2', long));
      await eventually(() => sent() === 3);
      // Its third: 2 in flight against small's 1, heavy; both workers have a prompt pending.
      all.push(stream('hot', 'hot-3', long));
      if (isolate) await eventually(() => gw.flow!.waiting(ENGINE_MODEL) === 1);
      else await eventually(() => sent() === 4);
      // Another tenant's request is not held behind it.
      all.push(stream('other', 'other-1', 'another short question'));
      await eventually(() => sent() === (isolate ? 4 : 5));
      expect(gw.flow!.waiting(ENGINE_MODEL)).toBe(isolate ? 1 : 0);
      const ids = [...a!.stats.requestIds, ...b!.stats.requestIds];
      expect(ids.includes('hot-3')).toBe(!isolate);
      // The held streams end (this engine answers them whole, and they fail): nothing is pending
      // any more, and the heavy prompt goes.
      a!.holdChats = false;
      b!.holdChats = false;
      await eventually(
        () =>
          gw.flow!.waiting(ENGINE_MODEL) === 0 &&
          [...a!.stats.requestIds, ...b!.stats.requestIds].includes('hot-3'),
      );
      await Promise.all(all);
    };
    await heavyRun(true);
    await heavyRun(false);
  });

  it('answers 503 fleet_saturated with Retry-After when a request’s queue deadline passes, and the engine never sees it', async () => {
    const e = await engine(vllm(1, 0.1, undefined, 1));
    const gw = await fx.gateway(saturatedFleet(e.url));
    e.holdChats = true;
    const blocker = post(`${gw.url}/v1/chat/completions`, ask(), { 'x-request-id': 'blocker' });
    await eventually(() => e.stats.requestIds.length === 1);
    const late = await post(`${gw.url}/v1/chat/completions`, ask(), {
      'x-request-id': 'late',
      'x-sluice-max-wait-ms': '150',
    });
    expect(late.status).toBe(503);
    expect(Number(late.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const error = (late.json() as { error: { code: string; waited_ms: number } }).error;
    expect(error.code).toBe('fleet_saturated');
    expect(error.waited_ms).toBeGreaterThanOrEqual(150);
    expect(
      await post(`${gw.url}/v1/chat/completions`, ask(), { 'x-sluice-priority': 'urgent' }),
    ).toMatchObject({
      status: 400,
    });
    e.holdChats = false;
    await blocker;
    expect(e.stats.requestIds).toEqual(['blocker']);
    expect(await metricOrZero(gw.url, 'sluice_flow_rejections_total', { priority: 'normal' })).toBe(1);
  });
});

interface Span {
  name: string;
  attributes: Record<string, unknown>;
}

/** A tiny OTLP/HTTP (JSON) receiver. */
async function otlpCollector(): Promise<{ url: string; spans(): Span[]; close(): Promise<void> }> {
  const spans: Span[] = [];
  type Value = {
    stringValue?: string;
    intValue?: string | number;
    doubleValue?: number;
    boolValue?: boolean;
  };
  const plain = (v: Value): unknown =>
    v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? v.boolValue));
  const server: Server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString('utf8')) as {
        resourceSpans: {
          scopeSpans: { spans: { name: string; attributes: { key: string; value: Value }[] }[] }[];
        }[];
      };
      for (const r of body.resourceSpans)
        for (const scope of r.scopeSpans)
          for (const s of scope.spans)
            spans.push({
              name: s.name,
              attributes: Object.fromEntries(s.attributes.map((a) => [a.key, plain(a.value)])),
            });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    spans: () => spans,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
