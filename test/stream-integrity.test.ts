import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import {
  chatBody,
  eventually,
  metric,
  metricOrZero,
  post,
  sseData,
  startGateway,
  startMocks,
} from './helpers/gateway.js';

/**
 * Every fault the mock worker injects after the first byte, streamed through the gateway with
 * the openai SDK and with raw fetch: the exact terminal event, the metric, the upstream abort.
 * A mid-stream failure is never retried (nothing is resumed unless asked for).
 */
interface Case {
  fault: string;
  code: string;
  reason: string;
  /** The gateway had to abort the upstream request (the engine was still sending or silent). */
  aborts: boolean;
  /** The engine's own error code the frame carries on (`undefined`: none; `null`: an engine event without one). */
  upstreamCode: string | number | null | undefined;
  /** The content chunks the client sees before the terminal frame (max_tokens is 10). */
  shown: number;
}

const CASES: Case[] = [
  {
    fault: 'reset_after:3',
    code: 'request_stream_closed',
    reason: 'upstream_closed',
    aborts: false,
    upstreamCode: undefined,
    shown: 3,
  },
  {
    fault: 'eof_after:3',
    code: 'request_stream_closed',
    reason: 'upstream_closed',
    aborts: false,
    upstreamCode: undefined,
    shown: 3,
  },
  {
    fault: 'no_finish',
    code: 'request_stream_closed',
    reason: 'upstream_closed',
    aborts: false,
    upstreamCode: undefined,
    shown: 10,
  },
  {
    fault: 'error_frame_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
    upstreamCode: 500,
    shown: 3,
  },
  {
    fault: 'error_frame_str_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
    upstreamCode: 'internal_error',
    shown: 3,
  },
  {
    fault: 'event_error_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
    upstreamCode: null,
    shown: 3,
  },
  {
    fault: 'stall_after:3',
    code: 'stream_idle_timeout',
    reason: 'idle_timeout',
    aborts: true,
    upstreamCode: undefined,
    shown: 3,
  },
  {
    fault: 'malformed_after:3',
    code: 'malformed_chunk',
    reason: 'read_error',
    aborts: true,
    upstreamCode: undefined,
    shown: 3,
  },
];

describe('a stream never just stops', () => {
  let workers: MockWorker[];
  let gateway: Gateway;
  let client: OpenAI;

  beforeAll(async () => {
    workers = await startMocks(2, { tokensPerSecond: 200 });
    gateway = await startGateway({
      workers: workers.map((w) => ({ url: w.url })),
      routing: { policy: 'round_robin' },
      timeouts: { idleMs: 250 },
      breaker: { failureThreshold: 1000 },
    });
    client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  const totals = () => workers.reduce((n, w) => n + w.stats.requests, 0);
  const aborted = () => workers.reduce((n, w) => n + w.stats.aborted, 0);
  const completed = () => workers.reduce((n, w) => n + w.stats.completed, 0);

  for (const api of ['chat_completions', 'completions'] as const) {
    for (const c of CASES) {
      it(`${api}: ${c.fault} ends with one ${c.code} error frame`, async () => {
        const labels = { api, model: 'mock-model', reason: c.reason };
        const before = await metricOrZero(gateway.url, 'sluice_stream_failures_total', labels);
        const requestsBefore = totals();
        const abortedBefore = aborted();
        const completedBefore = completed();
        const path = api === 'chat_completions' ? '/v1/chat/completions' : '/v1/completions';
        const body =
          api === 'chat_completions'
            ? chatBody({ stream: true, max_tokens: 10 })
            : { model: 'mock-model', prompt: 'hello', stream: true, max_tokens: 10 };
        const res = await post(`${gateway.url}${path}`, body, { 'x-mock-fault': c.fault });
        expect(res.status).toBe(200);
        const events = sseData(res.text);
        const last = JSON.parse(events.at(-1)!) as {
          error: { code: string; type: string; message: string; upstream_code?: unknown };
        };
        expect(last.error.code).toBe(c.code);
        expect(last.error.type).toBe('server_error');
        expect(last.error.upstream_code).toBe(c.upstreamCode);
        // Exactly one error frame; no [DONE]; no fabricated finish_reason.
        expect(events.filter((e) => e.includes('"error"'))).toHaveLength(1);
        expect(events).not.toContain('[DONE]');
        const chunks = events
          .slice(0, -1)
          .map((e) => JSON.parse(e) as { choices: { finish_reason: unknown }[] });
        expect(chunks.every((chunk) => chunk.choices.every((choice) => choice.finish_reason === null))).toBe(
          true,
        );
        const content = chunks.filter((chunk) => JSON.stringify(chunk).match(/"(content|text)":"[^"]/));
        expect(content).toHaveLength(c.shown);
        expect(await metric(gateway.url, 'sluice_stream_failures_total', labels)).toBe(before + 1);
        // Never retried after the first byte.
        expect(totals()).toBe(requestsBefore + 1);
        // Once the engine's request is over, it was aborted by the gateway exactly when it had to be:
        // an engine that ended or cut the stream itself is never counted aborted.
        await eventually(() => workers.every((w) => w.stats.inflight === 0));
        expect(aborted()).toBe(abortedBefore + (c.aborts ? 1 : 0));
        // The engine ended its answer itself exactly when it was not aborted and did not cut the connection.
        const cut = c.fault.startsWith('reset_after');
        expect(completed()).toBe(completedBefore + (c.aborts || cut ? 0 : 1));
      });
    }
  }

  it('the openai SDK surfaces the terminal error with its code', async () => {
    const stream = await client.chat.completions.create(
      { model: 'mock-model', messages: [{ role: 'user', content: 'x' }], stream: true, max_tokens: 10 },
      { headers: { 'x-mock-fault': 'reset_after:2' } },
    );
    let text = '';
    let caught: unknown;
    try {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(APIError);
    expect((caught as APIError).code).toBe('request_stream_closed');
    expect(text.trim().split(/\s+/)).toHaveLength(2);
  });

  it('a stream that finished but lost [DONE] is complete: [DONE] is added, nothing is counted', async () => {
    const before = await metricOrZero(gateway.url, 'sluice_stream_failures_total');
    const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 4 }), {
      'x-mock-fault': 'no_done',
    });
    const events = sseData(res.text);
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.filter((e) => e === '[DONE]')).toHaveLength(1);
    expect(await metricOrZero(gateway.url, 'sluice_stream_failures_total')).toBe(before);
  });

  it('the overall deadline ends a long stream and aborts upstream', async () => {
    const gw = await startGateway({
      workers: [{ url: workers[0]!.url }],
      timeouts: { deadlineMs: 300 },
    });
    try {
      const abortedBefore = workers[0]!.stats.aborted;
      const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 1000 }));
      const last = JSON.parse(sseData(res.text).at(-1)!) as { error: { code: string } };
      expect(last.error.code).toBe('stream_deadline_exceeded');
      expect(await metric(gw.url, 'sluice_stream_failures_total', { reason: 'deadline' })).toBe(1);
      await eventually(() => workers[0]!.stats.aborted === abortedBefore + 1);
    } finally {
      await gw.close();
    }
  });

  it('per-model timeouts override the global ones', async () => {
    const gw = await startGateway({
      workers: [{ url: workers[0]!.url }],
      timeouts: { idleMs: 60_000 },
      models: { 'mock-model': { timeouts: { idleMs: 150 } } },
    });
    try {
      const started = Date.now();
      const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 10 }), {
        'x-mock-fault': 'stall_after:2',
      });
      expect(JSON.parse(sseData(res.text).at(-1)!).error.code).toBe('stream_idle_timeout');
      // The global idle timeout would take 60 s: generous for a loaded machine.
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await gw.close();
    }
  });
});

describe('the idle clock restarts at every token', () => {
  interface ChatChunk {
    choices: { delta?: { content?: string }; finish_reason: string | null }[];
  }
  /** Reads a stream with fetch, noting when each of its events arrived. */
  async function timedEvents(url: string, headers: Record<string, string> = {}, tokens = 12) {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: tokens })),
    });
    expect(res.status).toBe(200);
    const events: { at: number; data: string }[] = [];
    const decoder = new TextDecoder();
    let pending = '';
    for await (const chunk of res.body!) {
      pending += decoder.decode(chunk, { stream: true });
      const parts = pending.split('\n\n');
      pending = parts.pop()!;
      for (const part of parts) events.push({ at: performance.now(), data: part.replace(/^data: /, '') });
    }
    return events;
  }

  it('a stream longer than the idle timeout, with a token within it every time, is never cut (and its gaps are counted when it ends); a stall is cut idleMs after the last token', async () => {
    // One token every 100 ms, 12 of them: 1.2 s, four times the idle timeout.
    const [worker] = await startMocks(1, { tokensPerSecond: 10 });
    const gw = await startGateway({ workers: [{ url: worker!.url }], timeouts: { idleMs: 300 } });
    try {
      const itl = { route: 'chat_completions', model: 'mock-model' };
      const before = await metricOrZero(gw.url, 'sluice_inter_token_latency_seconds_count', itl);
      const whole = await timedEvents(gw.url);
      expect(whole.at(-1)!.data).toBe('[DONE]');
      const chunks = whole.slice(0, -1).map((e) => JSON.parse(e.data) as ChatChunk);
      expect(chunks.filter((c) => c.choices[0]?.delta?.content).length).toBe(12);
      expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('length');
      // Every gap between a stream's tokens is in the inter-token histogram as soon as the stream
      // has ended (they are folded while it runs): five of ~100 ms, less than a fold's worth.
      const afterWhole = await metricOrZero(gw.url, 'sluice_inter_token_latency_seconds_count', itl);
      expect(afterWhole - before).toBeGreaterThanOrEqual(10);
      const short = await timedEvents(gw.url, {}, 5);
      expect(short.at(-1)!.data).toBe('[DONE]');
      const gaps = (await metricOrZero(gw.url, 'sluice_inter_token_latency_seconds_count', itl)) - afterWhole;
      expect(gaps).toBeGreaterThanOrEqual(3);
      expect(gaps).toBeLessThanOrEqual(6);
      // Four tokens, then nothing: cut 300 ms after the last one (not after the stream's start,
      // and not after the previous timer's turn).
      const stalled = await timedEvents(gw.url, { 'x-mock-fault': 'stall_after:4' });
      const last = stalled.at(-1)!;
      expect((JSON.parse(last.data) as { error: { code: string } }).error.code).toBe('stream_idle_timeout');
      const lastToken = stalled.filter((e) => e.data.includes('"content":"')).at(-1)!;
      expect(last.at - lastToken.at).toBeGreaterThanOrEqual(290);
      expect(last.at - lastToken.at).toBeLessThan(2_000);
    } finally {
      await gw.close();
      await worker!.close();
    }
  });
});
