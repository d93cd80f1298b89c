import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ResumableStream } from '../src/dispatch/resumable-stream.js';
import { MessagesStreamEncoder } from '../src/fronts/messages-stream.js';
import type { Gateway } from '../src/gateway.js';
import { sequence } from '../src/mock/generate.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { relayStream, type StreamOutcome } from '../src/pipeline/relay.js';
import type { ParsedChunk } from '../src/streams/chat-stream-tracker.js';
import type { EngineStreamSink } from '../src/streams/engine-stream.js';
import { EVIL_MODEL, type EvilEngine, startEvilEngine } from './helpers/evil-engine.js';
import {
  eventually,
  metric,
  metricOrZero,
  perTest,
  post,
  startGateway,
  startMocks,
} from './helpers/gateway.js';

/**
 * Stream integrity on the Messages API: every fault after the first byte ends the stream with
 * the open content block closed and one `error` event, never `message_stop` nor a made-up stop
 * reason; counted with api="messages"; the engine let go.
 */
interface SseEvent {
  event: string;
  data: Record<string, unknown> & { type: string };
}

function parseSse(text: string): SseEvent[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim().length > 0)
    .map((block) => ({
      event: /^event: (.*)$/m.exec(block)![1]!,
      data: JSON.parse(/^data: (.*)$/m.exec(block)![1]!) as SseEvent['data'],
    }));
}

interface Case {
  fault: string;
  code: string;
  reason: string;
  /** The gateway had to abort the upstream request (the engine was still sending or silent). */
  aborts: boolean;
}

const CASES: Case[] = [
  { fault: 'reset_after:3', code: 'request_stream_closed', reason: 'upstream_closed', aborts: false },
  { fault: 'eof_after:3', code: 'request_stream_closed', reason: 'upstream_closed', aborts: false },
  { fault: 'no_finish', code: 'request_stream_closed', reason: 'upstream_closed', aborts: false },
  {
    fault: 'error_frame_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
  },
  {
    fault: 'error_frame_str_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
  },
  {
    fault: 'event_error_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
  },
  { fault: 'stall_after:3', code: 'stream_idle_timeout', reason: 'idle_timeout', aborts: true },
  { fault: 'malformed_after:3', code: 'malformed_chunk', reason: 'read_error', aborts: true },
];

/** The shape every failed Messages stream has: a closed block, then one error event, nothing else. */
function expectFailedStream(events: SseEvent[], code: string): void {
  const names = events.map((e) => e.event);
  expect(names[0]).toBe('message_start');
  expect(names.at(-1)).toBe('error');
  expect(names.at(-2)).toBe('content_block_stop');
  expect(names.filter((n) => n === 'error')).toHaveLength(1);
  expect(names).not.toContain('message_stop');
  expect(names).not.toContain('message_delta');
  const error = events.at(-1)!.data as {
    type: string;
    error: { type: string; code: string; message: string };
  };
  expect(error.type).toBe('error');
  expect(error.error.type).toBe('api_error');
  expect(error.error.code).toBe(code);
  expect(error.error.message.length).toBeGreaterThan(0);
  // Every block that started was stopped once.
  const started = events.filter((e) => e.event === 'content_block_start').map((e) => e.data.index);
  const stopped = events.filter((e) => e.event === 'content_block_stop').map((e) => e.data.index);
  expect(stopped).toEqual(started);
}

describe('a Messages stream never just stops', () => {
  let workers: MockWorker[];
  let gateway: Gateway;

  beforeAll(async () => {
    workers = await startMocks(2, { tokensPerSecond: 200 });
    gateway = await startGateway({
      workers: workers.map((w) => ({ url: w.url })),
      routing: { policy: 'round_robin' },
      timeouts: { idleMs: 250 },
      breaker: { failureThreshold: 1000 },
    });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  const totals = () => workers.reduce((n, w) => n + w.stats.requests, 0);
  const aborted = () => workers.reduce((n, w) => n + w.stats.aborted, 0);
  const body = {
    model: 'mock-model',
    max_tokens: 10,
    stream: true,
    messages: [{ role: 'user', content: 'hi' }],
  };

  for (const c of CASES) {
    it(`${c.fault} ends with content_block_stop and one ${c.code} error event`, async () => {
      const labels = { api: 'messages', model: 'mock-model', reason: c.reason };
      const before = await metricOrZero(gateway.url, 'sluice_stream_failures_total', labels);
      const requestsBefore = totals();
      const abortedBefore = aborted();
      const res = await post(`${gateway.url}/v1/messages`, body, { 'x-mock-fault': c.fault });
      expect(res.status).toBe(200);
      const events = parseSse(res.text);
      expectFailedStream(events, c.code);
      const text = events
        .filter((e) => e.event === 'content_block_delta')
        .map((e) => (e.data.delta as { text: string }).text)
        .join('');
      if (c.fault.endsWith(':3')) expect(text).toBe(sequence(3));
      expect(await metric(gateway.url, 'sluice_stream_failures_total', labels)).toBe(before + 1);
      // Never retried after the first byte.
      expect(totals()).toBe(requestsBefore + 1);
      if (c.aborts) await eventually(() => aborted() === abortedBefore + 1);
      await eventually(() => workers.every((w) => w.stats.inflight === 0));
    });
  }

  it('the dashboard shows Messages requests and their stream failures', async () => {
    type Snapshot = {
      streamFailures: { bySeries: { api: string; reason: string; count: number }[] };
      recent: { requestId: string; route: string; outcome: string; code?: string }[];
    };
    const snapshot = async () => (await (await fetch(`${gateway.url}/dashboard/data`)).json()) as Snapshot;
    const closedCount = (s: Snapshot) =>
      s.streamFailures.bySeries.find((x) => x.api === 'messages' && x.reason === 'upstream_closed')?.count ??
      0;
    // Earlier tests of this gateway may have made the series: this request must add one to it.
    const before = closedCount(await snapshot());
    await post(`${gateway.url}/v1/messages`, body, {
      'x-mock-fault': 'eof_after:2',
      'x-request-id': 'dash-msg-1',
    });
    // The snapshot is made once a tick for every viewer: the next one has the request.
    let after = await snapshot();
    await eventually(async () => {
      after = await snapshot();
      return closedCount(after) > before;
    }, 10_000);
    expect(closedCount(after)).toBe(before + 1);
    expect(after.recent.find((r) => r.requestId === 'dash-msg-1')).toMatchObject({
      route: 'messages',
      outcome: 'failed',
      code: 'request_stream_closed',
    });
  });

  it('a failure inside a tool call closes the tool_use block, then the error', async () => {
    const res = await post(
      `${gateway.url}/v1/messages`,
      {
        ...body,
        tools: [{ name: 'get_weather', input_schema: { type: 'object' } }],
      },
      { 'x-mock-tool-call': 'get_weather', 'x-mock-fault': 'reset_after:3' },
    );
    const events = parseSse(res.text);
    expectFailedStream(events, 'request_stream_closed');
    const start = events.find((e) => e.event === 'content_block_start')!.data;
    expect(start.content_block).toMatchObject({ type: 'tool_use', name: 'get_weather' });
  });

  it('a failure inside thinking closes the thinking block, then the error', async () => {
    const res = await post(`${gateway.url}/v1/messages`, body, {
      'x-mock-reasoning': '6',
      'x-mock-fault': 'reset_after:3',
    });
    const events = parseSse(res.text);
    expectFailedStream(events, 'request_stream_closed');
    const deltas = events
      .filter((e) => e.event === 'content_block_delta')
      .map((e) => (e.data.delta as { type: string }).type);
    expect(deltas).toEqual(['thinking_delta', 'thinking_delta', 'thinking_delta', 'signature_delta']);
  });

  it('the SDK stream rejects with an APIError carrying the code; the text before it was shown', async () => {
    const client = new Anthropic({ baseURL: gateway.url, apiKey: 'x', maxRetries: 0 });
    const stream = client.messages.stream(
      { model: 'mock-model', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { 'x-mock-fault': 'reset_after:2' } },
    );
    let text = '';
    stream.on('text', (piece) => {
      text += piece;
    });
    const error = await stream.finalMessage().catch((err: unknown) => err);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    const apiError = error as InstanceType<typeof Anthropic.APIError>;
    expect(apiError.type).toBe('api_error');
    expect(apiError.error).toMatchObject({ error: { code: 'request_stream_closed' } });
    expect(text).toBe(sequence(2));
  });

  it('the overall deadline ends a long stream with an error event and aborts upstream', async () => {
    const gw = await startGateway({ workers: [{ url: workers[0]!.url }], timeouts: { deadlineMs: 300 } });
    try {
      const abortedBefore = workers[0]!.stats.aborted;
      const res = await post(`${gw.url}/v1/messages`, { ...body, max_tokens: 1000 });
      expectFailedStream(parseSse(res.text), 'stream_deadline_exceeded');
      expect(
        await metric(gw.url, 'sluice_stream_failures_total', { api: 'messages', reason: 'deadline' }),
      ).toBe(1);
      await eventually(() => workers[0]!.stats.aborted === abortedBefore + 1);
    } finally {
      await gw.close();
    }
  });
});

describe('graceful shutdown on the Messages API', () => {
  it('a stream still open when the grace period ends gets an overloaded_error event', async () => {
    const [worker] = await startMocks(1, { tokensPerSecond: 50 });
    const gateway = await startGateway({ workers: [{ url: worker!.url }] });
    const long = await fetch(`${gateway.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-model',
        max_tokens: 1000,
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    });
    const text = long.text();
    await eventually(() => worker!.stats.inflight === 1);
    // Read when the gateway closes its engine clients (which would end any engine request
    // anyway, and so would closing the mock): the stream's engine request must be aborted by then.
    let inflightAtPoolClose: number | undefined;
    const registry = gateway.context.registry;
    const closeAll = registry.closeAll.bind(registry);
    registry.closeAll = async () => {
      inflightAtPoolClose = worker!.stats.inflight;
      await closeAll();
    };
    const shutdown = gateway.shutdown(300);
    const events = parseSse(await text);
    await shutdown;
    expect(inflightAtPoolClose).toBe(0);
    expect(worker!.stats.aborted).toBe(1);
    await worker!.close();
    expect(events.at(-1)!.data).toMatchObject({
      type: 'error',
      error: { type: 'overloaded_error', code: 'dispatcher_closed' },
    });
    expect(events.map((e) => e.event)).not.toContain('message_stop');
    expect(events.at(-2)!.event).toBe('content_block_stop');
  });
});

describe('failover and resume on the Messages API', () => {
  const fx = perTest();

  /** Two workers, round robin: the first request goes to w0, which has the fault. */
  async function setup(faultA: string, resume: boolean) {
    const workers = await fx.mocks(2);
    workers[0]!.setFault(faultA);
    const gateway = await fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'round_robin' },
      models: resume ? { 'mock-model': { resume: { enabled: true } } } : {},
    });
    return { workers, gateway, client: new Anthropic({ baseURL: gateway.url, apiKey: 'x', maxRetries: 0 }) };
  }
  const ask = { model: 'mock-model', max_tokens: 10, messages: [{ role: 'user' as const, content: 'hi' }] };

  it('a failure before the first output is retried on the other worker, invisibly', async () => {
    const { workers, client } = await setup('reset_after:0', false);
    const message = await client.messages.stream(ask).finalMessage();
    expect(message.content).toEqual([{ type: 'text', text: sequence(10) }]);
    expect(workers[0]!.stats.requests).toBe(1);
    expect(workers[1]!.stats.requests).toBe(1);
  });

  it('a reset mid-stream is resumed on the other worker: one complete message, nothing counted as failed', async () => {
    const { workers, gateway, client } = await setup('reset_after:4', true);
    const res = await post(`${gateway.url}/v1/messages`, { ...ask, stream: true });
    expect(res.headers.get('x-sluice-worker')).toBe('w0');
    const events = parseSse(res.text);
    const names = events.map((e) => e.event);
    expect(names.at(-1)).toBe('message_stop');
    expect(names).not.toContain('error');
    expect(names.filter((n) => n === 'message_start')).toHaveLength(1);
    expect(names.filter((n) => n === 'content_block_start')).toHaveLength(1);
    const text = events
      .filter((e) => e.event === 'content_block_delta')
      .map((e) => (e.data.delta as { text: string }).text)
      .join('');
    expect(text).toBe(sequence(10));
    expect(workers[1]!.stats.requests).toBe(1);
    expect(
      await metric(gateway.url, 'sluice_stream_resumes_total', { model: 'mock-model', outcome: 'resumed' }),
    ).toBe(1);
    expect(await metricOrZero(gateway.url, 'sluice_stream_failures_total', { api: 'messages' })).toBe(0);
    // The SDK reads a resumed stream as one message.
    workers[1]!.setFault('reset_after:4');
    workers[0]!.setFault(undefined);
    const message = await client.messages.stream(ask).finalMessage();
    expect(message.content).toEqual([{ type: 'text', text: sequence(10) }]);
    expect(message.stop_reason).toBe('max_tokens');
  });

  it('a resumed prefill goes on from the prefill and the text shown', async () => {
    const { gateway } = await setup('reset_after:2', true);
    const res = await post(`${gateway.url}/v1/messages`, {
      ...ask,
      max_tokens: 6,
      stream: true,
      messages: [...ask.messages, { role: 'assistant', content: ' the quick' }],
    });
    const events = parseSse(res.text);
    expect(events.at(-1)!.event).toBe('message_stop');
    const text = events
      .filter((e) => e.event === 'content_block_delta')
      .map((e) => (e.data.delta as { text: string }).text)
      .join('');
    expect(text).toBe(sequence(6, 2));
  });
});

describe('an engine that reports its own failure as a finish', () => {
  const fx = perTest();
  const engines: EvilEngine[] = [];
  afterEach(async () => {
    await Promise.all(engines.splice(0).map((e) => e.close()));
  });

  it('finish_reason "abort" ends the Messages stream with an error event, never a stop reason', async () => {
    const engine = await startEvilEngine('finish:"abort"');
    engines.push(engine);
    const gateway = await fx.gateway({
      workers: [{ url: engine.url, id: 'evil-0', models: [EVIL_MODEL] }],
      breaker: { failureThreshold: 1000 },
    });
    const res = await post(`${gateway.url}/v1/messages`, {
      model: EVIL_MODEL,
      max_tokens: 10,
      stream: true,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(200);
    const events = parseSse(res.text);
    expectFailedStream(events, 'engine_aborted');
    expect(res.text).toContain('t2 ');
    expect(
      await metric(gateway.url, 'sluice_stream_failures_total', {
        api: 'messages',
        model: EVIL_MODEL,
        reason: 'engine_abort',
      }),
    ).toBe(1);

    // Not streamed: an Anthropic-shaped 502 instead of a message.
    const whole = await post(`${gateway.url}/v1/messages`, {
      model: EVIL_MODEL,
      max_tokens: 10,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(whole.status).toBe(502);
    expect(whole.json()).toMatchObject({
      type: 'error',
      error: { type: 'api_error', code: 'engine_aborted' },
    });
  });
});

describe('the Messages stream encoder on the pipeline relay, on its own', () => {
  /** A stand-in for the engine stream: the test drives its sink. */
  function fakeStream() {
    const fake = {
      sink: undefined as EngineStreamSink | undefined,
      abandoned: 0,
      worker: 'w-fake',
      models: ['m'],
      usage: { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 },
      finishReason: 'stop',
      attach(sink: EngineStreamSink) {
        fake.sink = sink;
      },
      pause() {},
      resume() {},
      abandon() {
        fake.abandoned++;
      },
    };
    return fake;
  }

  async function serve(fake: ReturnType<typeof fakeStream>, pingMs: number) {
    const done: Promise<StreamOutcome>[] = [];
    const server = createServer((_req, res) => {
      done.push(
        relayStream(
          res,
          fake as unknown as ResumableStream,
          new MessagesStreamEncoder('r1', 'm', undefined, pingMs),
          {
            requestId: 'r1',
            clientGone: new AbortController().signal,
          },
        ),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return { server, url, done };
  }

  const chunk = (content: string): ParsedChunk => ({ choices: [{ index: 0, delta: { content } }] });

  it('pings while the engine is quiet, then ends normally', async () => {
    const fake = fakeStream();
    const { server, url, done } = await serve(fake, 40);
    try {
      const response = await fetch(url);
      const text = response.text();
      await eventually(() => fake.sink !== undefined);
      fake.sink!.onEvents(Buffer.alloc(0), [chunk('hi')]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      fake.sink!.onComplete(true);
      const events = parseSse(await text).map((e) => e.event);
      expect(events.slice(0, 2)).toEqual(['message_start', 'ping']);
      // Quiet for 200 ms at one ping per 40 ms idle tick: some pings, between the text and its end.
      const stop = events.indexOf('content_block_stop');
      expect(events.slice(4, stop).filter((e) => e === 'ping').length).toBeGreaterThanOrEqual(2);
      expect(events.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
      expect((await done[0])!.kind).toBe('completed');
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('a client that goes away abandons the engine stream at once', async () => {
    const fake = fakeStream();
    const { server, url, done } = await serve(fake, 10_000);
    try {
      const controller = new AbortController();
      const response = await fetch(url, { signal: controller.signal });
      const reader = response.body!.getReader();
      await reader.read();
      controller.abort();
      await eventually(() => fake.abandoned === 1);
      expect((await done[0])!.kind).toBe('client_gone');
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
