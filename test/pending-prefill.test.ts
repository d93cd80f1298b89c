import { describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import { eventually, perTest, post } from './helpers/gateway.js';

/**
 * Pending prefill: the prompts the gateway sent a worker that have had no first token yet,
 * counted on that worker (the part its engine's cache likely lacks) until their first token or
 * their end. The scorer scores it (`prefill`):
 * engines report no prefill backlog, and a batch prefilling a long prompt delays every request
 * that joins it. The engines are the mock worker's engine model (vLLM-like continuous batching
 * with chunked prefill at `prefillTokensPerSecond`), slow enough that a long prompt's first
 * token takes about a second, so each count can be read before it.
 */
describe('pending prefill', () => {
  const fx = perTest();
  /** Only the prefill scorer counts, so that each pick says what it saw. */
  const PREFILL_ONLY = { prefix: 0, queue: 0, kvCache: 0, lora: 0, inflight: 0, prefill: 1 };
  const LONG = 'Summarize this document, every paragraph of it. '.repeat(60);

  async function pending(gw: Gateway): Promise<Record<string, number>> {
    const list = (await (await fetch(`${gw.url}/admin/workers`)).json()) as {
      data: { id: string; pendingPrefill: number }[];
    };
    return Object.fromEntries(list.data.map((w) => [w.id, w.pendingPrefill]));
  }

  /** A streaming chat request; resolves with the response once its headers are in. */
  function stream(gw: Gateway, content: string, signal?: AbortSignal): Promise<Response> {
    return fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        stream: true,
        max_tokens: 30,
        messages: [{ role: 'user', content }],
      }),
      signal,
    });
  }

  async function fleet(count: number, saturation: Record<string, number> = {}) {
    const workers = await fx.mocks(count, {
      models: ['m'],
      engine: { prefillTokensPerSecond: 500, decodeTokensPerSecond: 20 },
    });
    return fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'scorer', scorer: { weights: PREFILL_ONLY, saturation } },
    });
  }

  it('counts a prompt on its worker until its first token, and sends the next request to the other worker meanwhile', async () => {
    const gw = await fleet(2);
    const first = stream(gw, LONG);
    // Before any first token: the long prompt counts on the worker it went to.
    await eventually(async () => Object.values(await pending(gw)).some((n) => n > 0));
    const counted = await pending(gw);
    const busy = Object.keys(counted).find((id) => counted[id]! > 0)!;
    expect(counted[busy]).toBeGreaterThanOrEqual(LONG.length);
    const other = busy === 'w0' ? 'w1' : 'w0';
    expect(counted[other]).toBe(0);
    const next = await post(`${gw.url}/v1/chat/completions`, {
      model: 'm',
      max_tokens: 1,
      messages: [{ role: 'user', content: 'a short question' }],
    });
    expect(next.status, next.text).toBe(200);
    expect(next.headers.get('x-sluice-worker')).toBe(other);
    // Its first token ends the count, though its stream goes on.
    const res = await first;
    const reader = res.body!.getReader();
    const chunk = await reader.read();
    expect(new TextDecoder().decode(chunk.value)).toContain('data:');
    expect(await pending(gw)).toEqual({ w0: 0, w1: 0 });
    let done = false;
    while (!done) done = (await reader.read()).done;
  });

  it('frees the count when the client leaves before the first token', async () => {
    const gw = await fleet(1);
    const abort = new AbortController();
    const first = stream(gw, LONG, abort.signal).catch((err: unknown) => err);
    await eventually(async () => (await pending(gw)).w0! > 0);
    abort.abort();
    await first;
    await eventually(async () => (await pending(gw)).w0 === 0);
    expect(gw.context.registry.get('w0')!.limiter.inFlight).toBe(0);
  });
});
