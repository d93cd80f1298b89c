import { PassThrough } from 'node:stream';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import type { SluiceConfigInput } from '../src/config/schema.js';
import { drainWaiter } from '../src/pipeline/drain-waiter.js';
import { EVIL_MODEL, type EvilEngine, startEvilEngine } from './helpers/evil-engine.js';
import { eventually, metric, metricOrZero, perTest, post, sseData } from './helpers/gateway.js';

/**
 * Issue 28, part 7: what a request may ask of an engine, and what the gateway holds of one
 * answer, are bounded on every front (chat, completions, Responses, Anthropic Messages).
 */
const fixture = perTest();
const engines: EvilEngine[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
});

/** The heap in use after two full collections (the gateway runs in this process). */
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
function heapUsed(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

const MiB = 1024 * 1024;
const HUGE = Number.MAX_SAFE_INTEGER;

interface ErrorBody {
  error: { code: string; param: string | null; type: string; max_allowed?: number };
}

describe('output token bounds', () => {
  async function mockGateway(extra: SluiceConfigInput = {}, maxModelLen?: number) {
    const [worker] = await fixture.mocks(1, { models: ['mock-model', 'other-model'], maxModelLen });
    const gateway = await fixture.gateway({ workers: [{ url: worker!.url }], ...extra });
    await eventually(async () => (await fetch(`${gateway.url}/health/ready`)).status === 200);
    return { worker: worker!, url: gateway.url };
  }

  it('max_tokens 2^53-1 is a 400 max_tokens_too_large naming the field, on chat, completions, Responses and Messages; nothing reaches the engine', async () => {
    const { worker, url } = await mockGateway();
    const messages = [{ role: 'user', content: 'hi' }];
    const cases: { path: string; body: Record<string, unknown>; param: string }[] = [
      {
        path: '/v1/chat/completions',
        body: { model: 'mock-model', messages, max_tokens: HUGE },
        param: 'max_tokens',
      },
      {
        path: '/v1/chat/completions',
        body: { model: 'mock-model', messages, max_completion_tokens: HUGE, stream: true },
        param: 'max_completion_tokens',
      },
      {
        path: '/v1/completions',
        body: { model: 'mock-model', prompt: 'hi', max_tokens: HUGE },
        param: 'max_tokens',
      },
      {
        path: '/v1/responses',
        body: { model: 'mock-model', input: 'hi', max_output_tokens: HUGE },
        param: 'max_output_tokens',
      },
      {
        path: '/v1/responses',
        body: { model: 'mock-model', input: 'hi', max_output_tokens: HUGE, stream: true },
        param: 'max_output_tokens',
      },
    ];
    for (const c of cases) {
      const res = await post(`${url}${c.path}`, c.body);
      expect(res.status, `${c.path} ${c.param}`).toBe(400);
      const { error } = res.json() as ErrorBody;
      expect(error).toMatchObject({
        code: 'max_tokens_too_large',
        param: c.param,
        type: 'invalid_request_error',
        max_allowed: 128 * 1024,
      });
    }
    // The official SDKs see a bad request, in their API's shape.
    const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const refused = await openai.responses
      .create({ model: 'mock-model', input: 'hi', max_output_tokens: HUGE })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('max_output_tokens');
    const anthropic = new Anthropic({ baseURL: url, apiKey: 'x', maxRetries: 0 });
    const ask = {
      model: 'mock-model',
      max_tokens: HUGE,
      messages: [{ role: 'user' as const, content: 'hi' }],
    };
    // (A timeout of its own: the SDK refuses, before sending, a non-streaming call it expects to be long.)
    const denied = await anthropic.messages.create(ask, { timeout: 10_000 }).catch((err: unknown) => err);
    expect(denied).toBeInstanceOf(Anthropic.BadRequestError);
    const raw = await post(`${url}/v1/messages`, { ...ask, stream: true });
    expect(raw.status).toBe(400);
    expect(raw.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code: 'max_tokens_too_large', param: 'max_tokens' },
    });
    expect(worker.stats.requests).toBe(0);
  });

  it('models.<m>.maxOutputTokens overrides limits.maxOutputTokens: at the bound is served, one past it refused', async () => {
    const { worker, url } = await mockGateway({
      limits: { maxOutputTokens: 20 },
      models: { 'mock-model': { maxOutputTokens: 4 } },
    });
    const ask = (model: string, max_tokens: number) =>
      post(`${url}/v1/chat/completions`, { model, messages: [{ role: 'user', content: 'hi' }], max_tokens });
    expect((await ask('mock-model', 4)).status).toBe(200);
    const over = await ask('mock-model', 5);
    expect(over.status).toBe(400);
    expect((over.json() as ErrorBody).error).toMatchObject({ code: 'max_tokens_too_large', max_allowed: 4 });
    // A model without its own entry has the gateway's bound.
    expect((await ask('other-model', 20)).status).toBe(200);
    expect((await ask('other-model', 21)).status).toBe(400);
    expect(worker.stats.requests).toBe(2);
  });

  it("a worker's max_model_len (from its /v1/models) lowers the bound; a lower configured bound stays", async () => {
    const first = await mockGateway({}, 64);
    const ask = (url: string, max_tokens: number) =>
      post(`${url}/v1/responses`, { model: 'mock-model', input: 'hi', max_output_tokens: max_tokens });
    const over = await ask(first.url, 65);
    expect(over.status).toBe(400);
    expect((over.json() as ErrorBody).error).toMatchObject({
      code: 'max_tokens_too_large',
      param: 'max_output_tokens',
      max_allowed: 64,
    });
    expect((await ask(first.url, 64)).status).toBe(200);
    const second = await mockGateway({ limits: { maxOutputTokens: 32 } }, 64);
    expect(((await ask(second.url, 33)).json() as ErrorBody).error.max_allowed).toBe(32);
  });

  it('a request that names no limit is sent without one (the engine keeps its own default)', async () => {
    const { worker, url } = await mockGateway({ limits: { maxOutputTokens: 8 } });
    const res = await post(`${url}/v1/chat/completions`, {
      model: 'mock-model',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(200);
    const sent = worker.stats.lastBodies.at(-1) as Record<string, unknown>;
    expect(sent.max_tokens).toBeUndefined();
    expect(sent.max_completion_tokens).toBeUndefined();
  });
});

/** A gateway in front of the evil engine, whose mode a request picks with `x-evil`. */
async function evilGateway(extra: SluiceConfigInput = {}) {
  const engine = await startEvilEngine('ok');
  engines.push(engine);
  const gateway = await fixture.gateway({
    workers: [{ url: engine.url, id: 'evil-0', models: [EVIL_MODEL] }],
    server: { forwardHeaders: ['x-evil'] },
    ...extra,
  });
  return { engine, url: gateway.url };
}

describe('what the gateway holds of one answer is bounded', () => {
  /** Samples the heap while `work` runs; resolves its result and the largest growth seen. */
  async function peakGrowth<T>(work: Promise<T>): Promise<{ result: T; growth: number }> {
    const base = heapUsed();
    let peak = base;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().heapUsed);
    }, 5);
    try {
      const result = await work;
      return { result, growth: peak - base };
    } finally {
      clearInterval(sampler);
    }
  }

  it('Responses, non-streaming: an endless engine ends failed upstream_body_too_large at limits.maxBodyBytes, aborted, stored as shown, memory bounded; another client is answered meanwhile', async () => {
    const bound = 2 * MiB;
    const { engine, url } = await evilGateway({ limits: { maxBodyBytes: bound } });
    // Slow enough (a 1 KiB token a millisecond at most) that the other client comes and goes while it runs.
    const endless = post(
      `${url}/v1/responses`,
      { model: EVIL_MODEL, input: 'hi', max_output_tokens: 100_000 },
      { 'x-evil': 'endless:1024:1' },
    );
    let endlessDone = false;
    void endless.finally(() => {
      endlessDone = true;
    });
    await eventually(() => (engine.stats.bytes[0] ?? 0) > 64 * 1024, 10_000);
    const other = await post(`${url}/v1/responses`, { model: EVIL_MODEL, input: 'hi' }, { 'x-evil': 'ok' });
    expect(endlessDone).toBe(false);
    expect(other.status).toBe(200);
    expect((other.json() as { status: string }).status).toBe('completed');

    const { result: res, growth } = await peakGrowth(endless);
    expect(res.status).toBe(200);
    const body = res.json() as {
      id: string;
      status: string;
      error: { code: string };
      output: { status: string }[];
    };
    expect(body.status).toBe('failed');
    expect(body.error.code).toBe('upstream_body_too_large');
    // The partial message is kept, marked incomplete.
    expect(body.output[0]!.status).toBe('incomplete');
    await eventually(() => engine.stats.aborted === 1 && engine.stats.open === 0);
    // The gateway stopped reading near the bound.
    expect(engine.stats.bytes[0]!).toBeLessThan(4 * bound);
    // The run's events, closed, stay within about the bound (its closing copies counted ahead):
    // 5x the bound here, 15x before they were (issue 48).
    expect(growth).toBeLessThan(8 * bound);
    const stored = await fetch(`${url}/v1/responses/${body.id}`);
    expect(await stored.text()).toBe(res.text);
    expect(
      await metric(url, 'sluice_stream_failures_total', { api: 'responses', reason: 'limit_exceeded' }),
    ).toBe(1);
  });

  it('Responses, streaming: the stream ends with response.failed upstream_body_too_large, stored as shown', async () => {
    const bound = 2 * MiB;
    const { engine, url } = await evilGateway({ limits: { maxBodyBytes: bound } });
    const res = await post(
      `${url}/v1/responses`,
      { model: EVIL_MODEL, input: 'hi', stream: true },
      { 'x-evil': 'endless' },
    );
    const events = sseData(res.text).map((d) => JSON.parse(d) as { type: string; response?: { id: string } });
    const last = events.at(-1)!;
    expect(last.type).toBe('response.failed');
    const shown = JSON.stringify(last.response);
    expect((last.response as unknown as { error: { code: string } }).error.code).toBe(
      'upstream_body_too_large',
    );
    await eventually(() => engine.stats.aborted === 1 && engine.stats.open === 0);
    expect(engine.stats.bytes[0]!).toBeLessThan(8 * bound);
    expect(await (await fetch(`${url}/v1/responses/${last.response!.id}`)).text()).toBe(shown);
  });

  it('Messages, non-streaming: an endless body is a 502 in Anthropic shape with upstream_body_too_large, and the engine is let go', async () => {
    const bound = 2 * MiB;
    const { engine, url } = await evilGateway({ limits: { maxBodyBytes: bound } });
    const res = await post(
      `${url}/v1/messages`,
      { model: EVIL_MODEL, max_tokens: 100_000, messages: [{ role: 'user', content: 'hi' }] },
      { 'x-evil': 'endless' },
    );
    expect(res.status).toBe(502);
    expect(res.json()).toMatchObject({
      type: 'error',
      error: { type: 'api_error', code: 'upstream_body_too_large' },
    });
    await eventually(() => engine.stats.aborted === 1 && engine.stats.open === 0);
    expect(engine.stats.bytes[0]!).toBeLessThan(8 * bound);
  });

  it('Responses, streaming: a client that stops reading, then leaves, frees what the run held (heap growth far below what was streamed)', async () => {
    const { engine, url } = await evilGateway({ limits: { maxBodyBytes: 1024 * MiB } });
    // One whole stream first: what the first request of a gateway sets up once is not counted.
    await post(`${url}/v1/responses`, { model: EVIL_MODEL, input: 'hi', stream: true }, { 'x-evil': 'ok' });
    const base = heapUsed();
    const controller = new AbortController();
    const res = await fetch(`${url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-evil': 'endless' },
      body: JSON.stringify({ model: EVIL_MODEL, input: 'hi', stream: true }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    let received = 0;
    let head = '';
    while (received < 32 * MiB) {
      const { value } = await reader.read();
      received += value!.length;
      if (head.length < 4096) head += Buffer.from(value!).toString('utf8');
    }
    // The client stops reading: the gateway's socket fills and it pauses the engine ...
    const written = () => engine.stats.bytes[1]!;
    await eventually(async () => {
      const before = written();
      await new Promise((resolve) => setTimeout(resolve, 100));
      return written() === before;
    }, 10_000);
    // ... then leaves while the run waits for the socket to drain.
    controller.abort();
    await reader.cancel().catch(() => {});
    const id = /"id":"(resp_[^"]+)"/.exec(head)![1]!;
    await eventually(() => engine.stats.aborted === 1 && engine.stats.open === 0, 10_000);
    // The response is ended (stored as failed: the client left) before its memory is counted.
    await eventually(async () => {
      const stored = (await (await fetch(`${url}/v1/responses/${id}`)).json()) as { status: string };
      return stored.status === 'failed';
    }, 10_000);
    expect(written()).toBeGreaterThan(32 * MiB);
    expect(heapUsed() - base).toBeLessThan(received / 4);
    expect(await metricOrZero(url, 'sluice_client_disconnects_total', { api: 'responses' })).toBe(1);
  });

  it('a relay waiting for a client that leaves instead of draining lets go of what it waited with', async () => {
    const res = new PassThrough({ highWaterMark: 1 });
    const wait = drainWaiter(res);
    let held: WeakRef<object> | undefined;
    (() => {
      // What a paused stream's resume keeps alive: the run and everything it built.
      const run = { text: 'x'.repeat(1024) };
      held = new WeakRef(run);
      wait(() => void run.text);
    })();
    expect(res.listenerCount('drain')).toBe(1);
    res.destroy();
    await new Promise((resolve) => setImmediate(resolve));
    expect(res.listenerCount('drain')).toBe(0);
    heapUsed();
    expect(held!.deref()).toBeUndefined();
    // A wait asked of a closed destination is never kept either.
    wait(() => {});
    expect(res.listenerCount('drain')).toBe(0);
  });

  it('chat with resume on: the text kept for a continuation is bounded; past it a failure is not resumed', async () => {
    const workers = await fixture.mocks(2);
    workers[0]!.setFault('reset_after:40');
    const gateway = await fixture.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'round_robin' },
      limits: { maxBodyBytes: 64 },
      models: { 'mock-model': { resume: { enabled: true } } },
    });
    const res = await post(`${gateway.url}/v1/chat/completions`, {
      model: 'mock-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 60,
      stream: true,
    });
    const last = JSON.parse(sseData(res.text).at(-1)!) as { error: { code: string } };
    expect(last.error.code).toBe('request_stream_closed');
    expect(await metric(gateway.url, 'sluice_stream_resumes_total', { outcome: 'unsafe' })).toBe(1);
    expect(workers[1]!.stats.requests).toBe(0);
  });
});

describe('what all requests hold together is bounded (limits.maxHeldBytes)', () => {
  it('endless Responses runs end failed gateway_memory_full when the budget is full, each stored as shown, while a small answer completes; every byte goes back', async () => {
    // Each run may hold far more on its own (maxBodyBytes): the shared budget is what stops them.
    const { engine, url } = await evilGateway({ limits: { maxBodyBytes: 64 * MiB, maxHeldBytes: 4 * MiB } });
    expect(await metric(url, 'sluice_held_bytes_limit')).toBe(4 * MiB);
    const endless = [0, 1, 2].map(() =>
      post(`${url}/v1/responses`, { model: EVIL_MODEL, input: 'hi' }, { 'x-evil': 'endless:1024:1' }),
    );
    let ended = 0;
    for (const run of endless) void run.finally(() => ended++);
    await eventually(async () => (await metric(url, 'sluice_held_bytes')) > 0, 10_000);
    const small = await post(`${url}/v1/responses`, { model: EVIL_MODEL, input: 'hi' }, { 'x-evil': 'ok' });
    expect(small.status).toBe(200);
    expect((small.json() as { status: string }).status).toBe('completed');
    const answers = await Promise.all(endless);
    expect(ended).toBe(3);
    for (const res of answers) {
      expect(res.status).toBe(200);
      const body = res.json() as { id: string; status: string; error: { code: string } };
      expect(body.status).toBe('failed');
      expect(body.error.code).toBe('gateway_memory_full');
      expect(await (await fetch(`${url}/v1/responses/${body.id}`)).text()).toBe(res.text);
    }
    await eventually(() => engine.stats.aborted === 3 && engine.stats.open === 0);
    // Past the three floors and the budget, nothing more was read (the engine sent ~1 KiB a ms).
    const read = engine.stats.bytes.slice(0, 3).reduce((a, b) => a + b, 0);
    expect(read).toBeLessThan(3 * MiB + 4 * MiB);
    expect(await metric(url, 'sluice_held_bytes')).toBe(0);
    expect(
      await metric(url, 'sluice_stream_failures_total', { api: 'responses', reason: 'limit_exceeded' }),
    ).toBe(3);
  });

  it('a non-streaming chat answer larger than the floor and the budget is a 503 gateway_memory_full in OpenAI shape with Retry-After; the same answer fits once the budget allows it', async () => {
    const { engine, url } = await evilGateway({ limits: { maxHeldBytes: 1 * MiB } });
    const body = { model: EVIL_MODEL, messages: [{ role: 'user', content: 'hi' }] };
    const res = await post(`${url}/v1/chat/completions`, body, { 'x-evil': 'huge_body:4' });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(res.json()).toMatchObject({ error: { code: 'gateway_memory_full', type: 'server_error' } });
    // Not retried on the engine: the gateway's memory, not the engine, refused it.
    expect(engine.stats.requests).toBe(1);
    const small = await post(`${url}/v1/chat/completions`, body, { 'x-evil': 'huge_body:1' });
    expect(small.status).toBe(200);
    expect(await metric(url, 'sluice_held_bytes')).toBe(0);
  });
});

describe('count_tokens is admitted like any request', () => {
  const ADMIN = 'admin-key-for-limits-tests';

  it('a key with rpm 1 gets one count, then a 429 in Anthropic shape', async () => {
    const [worker] = await fixture.mocks(1);
    const gateway = await fixture.gateway({ auth: { adminKey: ADMIN }, workers: [{ url: worker!.url }] });
    const created = await post(
      `${gateway.url}/admin/keys`,
      { name: 'counter', rpm: 1 },
      { authorization: `Bearer ${ADMIN}` },
    );
    expect(created.status).toBe(201);
    const { key } = created.json() as { key: string };
    const body = { model: 'mock-model', messages: [{ role: 'user', content: 'count me' }] };
    const client = new Anthropic({ baseURL: gateway.url, apiKey: key, maxRetries: 0 });
    const counted = await client.messages.countTokens(body as Anthropic.MessageCountTokensParams);
    expect(counted.input_tokens).toBeGreaterThan(0);
    const refused = await post(`${gateway.url}/v1/messages/count_tokens`, body, { 'x-api-key': key });
    expect(refused.status).toBe(429);
    expect(refused.json()).toMatchObject({
      type: 'error',
      error: { type: 'rate_limit_error', code: 'rate_limit_exceeded' },
    });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    const sdkError = await client.messages
      .countTokens(body as Anthropic.MessageCountTokensParams)
      .catch((err: unknown) => err);
    expect(sdkError).toBeInstanceOf(Anthropic.RateLimitError);
  });
});
