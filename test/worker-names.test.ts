import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { rawJsonRoute } from '../src/api/raw-json-route.js';
import { parseConfig } from '../src/config/load.js';
import { WorkerRegistry } from '../src/workers/registry.js';
import { eventually, perTest, post, samples } from './helpers/gateway.js';
import { ENGINE_MODEL, type MetricsEngine, startMetricsEngine } from './helpers/metrics-engine.js';

/**
 * Names a worker reports (its `/v1/models`, its `/metrics`' LoRA labels) are hostile input: a
 * name past Latin-1 is served and named in headers percent-encoded, a name with control
 * characters is not served, and no name can throw out of a request or grow the model list
 * without bound.
 */

const CHINESE = '模型-lora';
const ESC = 'evil\u001b[31m-red';
const CRLF = 'evil\r\nx-injected: 1';

describe('model names past Latin-1 and with control characters, through a gateway', () => {
  const fx = perTest();

  async function gatewayOf() {
    const [worker] = await fx.mocks(1, { models: ['mock-model', CHINESE, ESC, CRLF, 'café'] });
    const gateway = await fx.gateway({ workers: [{ url: worker!.url, id: 'w' }] });
    await eventually(() => gateway.context.registry.knowsModel(CHINESE));
    return gateway;
  }

  it('serves 模型-lora on chat, Responses and Messages, whole and streamed, naming it in X-Sluice-Model percent-encoded', async () => {
    const gateway = await gatewayOf();
    const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const anthropic = new Anthropic({ baseURL: gateway.url, apiKey: 'x', maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'hi' }];
    const headers: Headers[] = [];

    const chat = await openai.chat.completions
      .create({ model: CHINESE, messages, max_tokens: 3 })
      .withResponse();
    expect(chat.data.choices[0]!.message.content).toBeTruthy();
    headers.push(chat.response.headers);

    const chatStream = await openai.chat.completions
      .create({ model: CHINESE, messages, max_tokens: 3, stream: true })
      .withResponse();
    let streamed = '';
    for await (const chunk of chatStream.data) streamed += chunk.choices[0]?.delta.content ?? '';
    expect(streamed).toBeTruthy();
    headers.push(chatStream.response.headers);

    const response = await openai.responses
      .create({ model: CHINESE, input: 'hi', max_output_tokens: 3 })
      .withResponse();
    expect(['completed', 'incomplete']).toContain(response.data.status);
    headers.push(response.response.headers);

    const responseStream = await openai.responses
      .create({ model: CHINESE, input: 'hi', max_output_tokens: 3, stream: true })
      .withResponse();
    const types: string[] = [];
    for await (const event of responseStream.data) types.push(event.type);
    expect(types.at(-1)).toMatch(/^response\.(completed|incomplete)$/);
    headers.push(responseStream.response.headers);

    const message = await anthropic.messages
      .create({ model: CHINESE, messages, max_tokens: 3 })
      .withResponse();
    expect(message.data.content.length).toBeGreaterThan(0);
    headers.push(message.response.headers);

    const messageStream = await anthropic.messages
      .create({ model: CHINESE, messages, max_tokens: 3, stream: true })
      .withResponse();
    const events: string[] = [];
    for await (const event of messageStream.data) events.push(event.type);
    expect(events.at(-1)).toBe('message_stop');
    headers.push(messageStream.response.headers);

    for (const h of headers) {
      expect(h.get('x-sluice-model')).toBe('%E6%A8%A1%E5%9E%8B-lora');
      expect(decodeURIComponent(h.get('x-sluice-model')!)).toBe(CHINESE);
      expect(h.get('x-sluice-worker')).toBe('w');
    }
    // Latin-1 names too are encoded now, and decode back.
    const cafe = await post(`${gateway.url}/v1/chat/completions`, {
      model: 'café',
      messages,
      max_tokens: 2,
    });
    expect(cafe.status).toBe(200);
    expect(decodeURIComponent(cafe.headers.get('x-sluice-model')!)).toBe('café');
    // Its metric label is the name itself.
    const text = await (await fetch(`${gateway.url}/metrics`)).text();
    expect(
      samples(text, 'sluice_requests_total').some(
        (s) => s.labels.model === CHINESE && s.labels.status === '200',
      ),
    ).toBe(true);
  });

  it('does not serve names with ESC or CR LF: 404 model_not_found on every route, labelled unknown, and the gateway stays up', async () => {
    const gateway = await gatewayOf();
    const listed = (await (await fetch(`${gateway.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(listed.data.map((m) => m.id).sort()).toEqual(['café', 'mock-model', CHINESE].sort());
    const admin = (await (await fetch(`${gateway.url}/admin/workers`)).json()) as {
      data: { models: string[] }[];
    };
    expect(admin.data[0]!.models.sort()).toEqual(['café', 'mock-model', CHINESE].sort());
    const messages = [{ role: 'user', content: 'hi' }];
    for (const model of [ESC, CRLF]) {
      for (const stream of [false, true]) {
        const asks = [
          post(`${gateway.url}/v1/chat/completions`, { model, messages, max_tokens: 2, stream }),
          post(`${gateway.url}/v1/responses`, { model, input: 'hi', max_output_tokens: 2, stream }),
          post(`${gateway.url}/v1/messages`, { model, messages, max_tokens: 2, stream }),
        ];
        for (const res of await Promise.all(asks)) {
          expect(res.status, res.text).toBe(404);
          expect(res.text).toContain('model_not_found');
          expect(res.headers.get('x-injected')).toBeNull();
        }
      }
    }
    const text = await (await fetch(`${gateway.url}/metrics`)).text();
    expect(text).not.toContain('\u001b');
    expect(text).not.toContain('x-injected');
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
  });
});

describe('a reply whose headers node:http refuses', () => {
  let server: Server | undefined;
  afterEach(async () => {
    await new Promise((resolve) => server?.close(resolve));
    server = undefined;
  });

  it('is answered 500 internal_error without the header, and the process goes on serving', async () => {
    const handle = rawJsonRoute({
      routes: new Map([
        [
          '/v1/chat/completions',
          {
            handle: async (_request, reply) => {
              reply.code(200).header('x-raw-name', CHINESE).send({ ok: true });
            },
          },
        ],
      ]),
      bodyLimit: 1024,
      log: pino({ level: 'silent' }),
      draining: () => false,
    });
    server = createServer((req, res) => {
      if (!handle(req, res)) res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
    for (let i = 0; i < 3; i++) {
      const res = await post(url, { model: 'm' });
      expect(res.status).toBe(500);
      expect((res.json() as { error: { code: string } }).error.code).toBe('internal_error');
      expect(res.headers.get('x-raw-name')).toBeNull();
    }
  });
});

/** A vLLM `/metrics` body whose LoRA gauge names `adapters`, spread over series of 12,500 names each. */
function vllmWithAdapters(adapters: readonly string[]): string {
  const lines = [
    '# TYPE vllm:num_requests_running gauge',
    'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
    '# TYPE vllm:num_requests_waiting gauge',
    'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
    '# TYPE vllm:lora_requests_info gauge',
  ];
  for (let i = 0, engine = 0; i < adapters.length; i += 12_500, engine++) {
    const names = adapters.slice(i, i + 12_500).join(',');
    lines.push(
      `vllm:lora_requests_info{engine="${engine}",max_lora="4",running_lora_adapters="",waiting_lora_adapters="${names}"} 1.7e+09`,
    );
  }
  return `${lines.join('\n')}\n`;
}

describe('adapters learnt from engine signals', () => {
  const fx = perTest();
  const engines: MetricsEngine[] = [];
  afterEach(async () => {
    await Promise.all(engines.splice(0).map((e) => e.close()));
  });

  it('an engine naming 200,000 new adapters a scrape grows the model list by signals.maxAdapters at most', async () => {
    let scrape = 0;
    const engine = await startMetricsEngine({ kind: 'text', body: '' });
    engines.push(engine);
    // Each read of /metrics names 200,000 adapters no read named before.
    Object.defineProperty(engine, 'metrics', {
      get: () => {
        const n = scrape++;
        return {
          kind: 'text',
          body: vllmWithAdapters(Array.from({ length: 200_000 }, (_, i) => `f${n}-${i}`)),
        };
      },
      set: () => {},
    });
    // The engine runs in this process: its bodies and the gateway's parsing of them share one
    // event loop, so neither a health check nor a read is timed out here. Its 2 MB of LoRA lines
    // are kept (by default past signals.maxSampleBytes they are refused unparsed,
    // engine-signals-bounds.test.ts): the registry's own bound is what is tested here.
    const gateway = await fx.gateway({
      workers: [{ url: engine.url, id: 'e' }],
      signals: { intervalMs: 50, timeoutMs: 20_000, maxSampleBytes: 4 * 1024 * 1024 },
      health: { timeoutMs: 20_000 },
    });
    const registry = gateway.context.registry;
    const sizes: number[] = [];
    await eventually(async () => {
      sizes.push(registry.models().length);
      return engine.stats.metricsRequests >= 4 && registry.models().length > 1;
    }, 30_000);
    sizes.push(registry.models().length);
    // The listed model and at most 256 adapters, ever.
    expect(Math.max(...sizes)).toBeLessThanOrEqual(1 + 256);
    expect(registry.models()).toContain(ENGINE_MODEL);
    expect(registry.get('e')!.learntAdapters.size).toBe(256);
    // The gateway serves meanwhile, and its model list is the bounded one.
    const listed = (await (await fetch(`${gateway.url}/v1/models`)).json()) as { data: unknown[] };
    expect(listed.data.length).toBeLessThanOrEqual(257);
    const res = await post(`${gateway.url}/v1/chat/completions`, {
      model: ENGINE_MODEL,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status, res.text).toBe(200);
  });

  it('an adapter no reading names for signals.adapterExpiryMs stops being served; one still named stays', async () => {
    const flood = Array.from({ length: 300 }, (_, i) => `flood-${i}`);
    const engine = await startMetricsEngine({
      kind: 'text',
      body: vllmWithAdapters([...flood, 'keep-lora']),
    });
    engines.push(engine);
    const gateway = await fx.gateway({
      workers: [{ url: engine.url, id: 'e' }],
      signals: { intervalMs: 50, maxAdapters: 8, adapterExpiryMs: 400 },
    });
    const registry = gateway.context.registry;
    await eventually(() => registry.models().length === 1 + 8);
    // The first 8 named are served; the rest wait for room.
    expect(registry.knowsModel('flood-0')).toBe(true);
    expect(registry.knowsModel('keep-lora')).toBe(false);
    engine.metrics = { kind: 'text', body: vllmWithAdapters(['keep-lora']) };
    await eventually(() => registry.knowsModel('keep-lora') && !registry.knowsModel('flood-0'), 10_000);
    expect(registry.models().sort()).toEqual(['keep-lora', ENGINE_MODEL].sort());
    const ask = (model: string) =>
      post(`${gateway.url}/v1/chat/completions`, { model, messages: [{ role: 'user', content: 'hi' }] });
    expect((await ask('flood-0')).status).toBe(404);
    expect((await ask('keep-lora')).status).toBe(200);
  });

  it('the registry expires by the clock it is given, and costs nothing when a reading changes nothing', async () => {
    const registry = new WorkerRegistry(parseConfig({}));
    try {
      const worker = registry.add({ url: 'http://127.0.0.1:9' }, 'static');
      registry.setModels(worker, ['base']);
      registry.noteAdapters(worker, ['a', 'b'], 0);
      expect(registry.forModel('a')).toEqual([worker]);
      const models = worker.models;
      // Named again: nothing changes, not even the worker's set.
      registry.noteAdapters(worker, ['a', 'b'], 30_000);
      expect(worker.models).toBe(models);
      // `b` named, `a` not, for longer than the default 60 s.
      registry.noteAdapters(worker, ['b'], 61_000);
      registry.noteAdapters(worker, ['b'], 90_001);
      expect(registry.knowsModel('a')).toBe(false);
      expect(registry.forModel('a')).toEqual([]);
      expect(worker.serves('a')).toBe(false);
      expect(worker.adapters.has('a')).toBe(false);
      expect(registry.knowsModel('b')).toBe(true);
      // At most 256 (the default) known so; a model it lists is not one of them.
      const many = Array.from({ length: 1000 }, (_, i) => `x${i}`);
      const noted = registry.noteAdapters(worker, ['base', ...many], 90_002);
      expect(noted).toEqual({ added: 255, expired: 0, ignored: 745 });
      expect(registry.models().length).toBe(1 + 256);
      expect(worker.adapters.get('base')).toBeUndefined();
    } finally {
      await registry.closeAll();
    }
  });
});

describe('what a worker lists on /v1/models', () => {
  const fx = perTest();
  const engines: MetricsEngine[] = [];
  afterEach(async () => {
    await Promise.all(engines.splice(0).map((e) => e.close()));
  });

  it('at most 4096 models of one worker are served', async () => {
    const models = Array.from({ length: 5000 }, (_, i) => ({ id: `m-${i}` }));
    const engine = await startMetricsEngine({ kind: 'status', status: 404 }, { models });
    engines.push(engine);
    const gateway = await fx.gateway({ workers: [{ url: engine.url }] });
    await eventually(() => gateway.context.registry.models().length > 0);
    expect(gateway.context.registry.models().length).toBe(4096);
    expect(gateway.context.registry.knowsModel('m-4095')).toBe(true);
    expect(gateway.context.registry.knowsModel('m-4096')).toBe(false);
  });

  it('a /v1/models answer past 8 MiB is not read: the worker serves nothing and the gateway stays up', async () => {
    const models = Array.from({ length: 5000 }, (_, i) => ({ id: `m-${i}`, root: 'r'.repeat(2048) }));
    const engine = await startMetricsEngine({ kind: 'status', status: 404 }, { models });
    engines.push(engine);
    // Not a health check's timeout (the engine shares this process): the bound on bytes.
    const gateway = await fx.gateway({
      workers: [{ url: engine.url, id: 'big' }],
      health: { timeoutMs: 20_000 },
    });
    const worker = gateway.context.registry.get('big')!;
    await eventually(() => worker.lastError !== null);
    expect(worker.lastError!.message).toContain('more than 8388608 bytes');
    expect(gateway.context.registry.models()).toEqual([]);
    expect((await fetch(`${gateway.url}/health`)).status).toBeLessThan(600);
  });
});
