import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import type { SluiceConfigInput } from '../src/config/schema.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { perTest, post } from './helpers/gateway.js';

/**
 * Issue 48: a fallback chain obeys the caller's key like the model it asked for, names each
 * model once, and has one count of engine attempts for the whole chain. One mock worker per
 * model, so that each worker's request count is its model's attempts.
 */

const ADMIN = 'admin-key-for-fallback-bounds-0123';
const admin = { authorization: `Bearer ${ADMIN}` };
const TOKENS = 4;

describe('fallback chains: the key, duplicates, one attempt budget', () => {
  const fx = perTest();

  /** A worker for each model in `models`, and a gateway over them with the admin key set. */
  async function setup(models: readonly string[], input: SluiceConfigInput = {}) {
    const workers = await Promise.all(
      models.map(async (model) => (await fx.mocks(1, { tokensPerSecond: 0, models: [model] }))[0]!),
    );
    const gateway = await fx.gateway({
      ...input,
      auth: { adminKey: ADMIN },
      workers: workers.map((w, i) => ({ url: w.url, id: `w-${models[i]}` })),
    });
    const byModel = Object.fromEntries(models.map((m, i) => [m, workers[i]!])) as Record<string, MockWorker>;
    const key = async (allowed?: string[]) => {
      const created = await post(`${gateway.url}/admin/keys`, allowed ? { models: allowed } : {}, admin);
      expect(created.status).toBe(201);
      return (created.json() as { key: string }).key;
    };
    return { gateway, byModel, key };
  }

  const openai = (url: string, apiKey: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 });
  const anthropic = (url: string, apiKey: string) => new Anthropic({ baseURL: url, apiKey, maxRetries: 0 });
  const messages = [{ role: 'user' as const, content: 'hi' }];

  /** Each front's request for `model`, with the key given: what answered it, or the status it failed with. */
  async function everyFront(url: string, apiKey: string, model: string) {
    const oa = openai(url, apiKey);
    const an = anthropic(url, apiKey);
    const outcome = async (run: () => Promise<string>) => {
      try {
        return { model: await run() };
      } catch (err) {
        // An API error's status; anything else (an assertion of the run) fails the test.
        const status = (err as { status?: unknown }).status;
        if (typeof status !== 'number') throw err;
        return { status };
      }
    };
    return {
      chat: await outcome(async () => {
        const { data, response } = await oa.chat.completions
          .create({ model, messages, max_tokens: TOKENS })
          .withResponse();
        expect(data.model).toBe(response.headers.get('x-sluice-model'));
        return data.model;
      }),
      chatStream: await outcome(async () => {
        const { data, response } = await oa.chat.completions
          .create({ model, messages, max_tokens: TOKENS, stream: true })
          .withResponse();
        const seen = new Set<string>();
        for await (const chunk of data) seen.add(chunk.model);
        expect([...seen]).toEqual([response.headers.get('x-sluice-model')]);
        return [...seen][0]!;
      }),
      responses: await outcome(async () => {
        const { data, response } = await oa.responses
          .create({ model, input: 'hi', max_output_tokens: TOKENS })
          .withResponse();
        expect(data.model).toBe(response.headers.get('x-sluice-model') ?? data.model);
        return data.model;
      }),
      messages: await outcome(async () => {
        const { data, response } = await an.messages
          .create({ model, messages, max_tokens: TOKENS })
          .withResponse();
        // The body names the model that answered, as the header does.
        expect(data.model).toBe(response.headers.get('x-sluice-model'));
        return data.model;
      }),
      messagesStream: await outcome(async () => {
        const { data, response } = await an.messages
          .create({ model, messages, max_tokens: TOKENS, stream: true })
          .withResponse();
        let started = '';
        for await (const event of data) if (event.type === 'message_start') started = event.message.model;
        expect(started).toBe(response.headers.get('x-sluice-model'));
        return started;
      }),
    };
  }

  it('a configured fallback the key may not use is never reached, on every front; a wider key reaches it', async () => {
    const { gateway, byModel, key } = await setup(['c', 's'], {
      models: { c: { fallbacks: ['s'] } },
      retry: { maxAttempts: 1 },
    });
    byModel.c!.setFault('http_503', 'c');
    const narrow = await everyFront(gateway.url, await key(['c']), 'c');
    for (const [front, got] of Object.entries(narrow)) {
      expect(got, front).not.toHaveProperty('model');
      expect((got as { status: number }).status, front).toBeGreaterThanOrEqual(500);
    }
    expect(byModel.s!.stats.requests).toBe(0);
    // The same chain for a key that may use both: every front is answered by the fallback.
    const wide = await everyFront(gateway.url, await key(['c', 's']), 'c');
    for (const [front, got] of Object.entries(wide)) expect(got, front).toEqual({ model: 's' });
    expect(byModel.s!.stats.requests).toBe(Object.keys(wide).length);
  });

  it('a forbidden configured fallback is skipped, not refused: the next one the key may use answers', async () => {
    const { gateway, byModel, key } = await setup(['c', 's', 't'], {
      models: { c: { fallbacks: ['s', 't'] } },
      retry: { maxAttempts: 1 },
    });
    byModel.c!.setFault('http_503', 'c');
    const got = await everyFront(gateway.url, await key(['c', 't']), 'c');
    for (const [front, answer] of Object.entries(got)) expect(answer, front).toEqual({ model: 't' });
    expect(byModel.s!.stats.requests).toBe(0);
    // The request naming the forbidden model itself is still refused.
    const named = await post(
      `${gateway.url}/v1/chat/completions`,
      { model: 'c', messages, max_tokens: TOKENS, fallbacks: ['s'] },
      { authorization: `Bearer ${await key(['c', 't'])}` },
    );
    expect(named.status).toBe(403);
    expect((named.json() as { error: { code: string } }).error.code).toBe('model_not_allowed');
  });

  it('a stream cut mid-answer is not continued on a configured fallback the key may not use', async () => {
    const { gateway, byModel, key } = await setup(['c', 's'], { models: { c: { fallbacks: ['s'] } } });
    byModel.c!.setFault('reset_after:2', 'c');
    const res = await post(
      `${gateway.url}/v1/chat/completions`,
      { model: 'c', messages, max_tokens: 12, stream: true },
      { authorization: `Bearer ${await key(['c'])}` },
    );
    expect(res.status).toBe(200);
    expect(res.text).not.toContain('[DONE]');
    expect(res.text).toContain('"error"');
    expect(byModel.s!.stats.requests).toBe(0);
  });

  it('embeddings and compaction: the configured chain obeys the key too', async () => {
    const { gateway, byModel, key } = await setup(['c', 's'], {
      models: { c: { fallbacks: ['s'] } },
      retry: { maxAttempts: 1 },
    });
    // Worker-wide: the mock's pooling endpoints take its worker-wide fault.
    byModel.c!.setFault('http_503');
    const apiKey = await key(['c']);
    const auth = { authorization: `Bearer ${apiKey}` };
    const embedded = await post(`${gateway.url}/v1/embeddings`, { model: 'c', input: 'hi' }, auth);
    const compacted = await post(`${gateway.url}/v1/responses/compact`, { model: 'c', input: 'hi' }, auth);
    expect(embedded.status).toBeGreaterThanOrEqual(500);
    expect(compacted.status).toBeGreaterThanOrEqual(500);
    expect(byModel.s!.stats.requests).toBe(0);
    const wide = { authorization: `Bearer ${await key(['c', 's'])}` };
    const rescued = await post(`${gateway.url}/v1/embeddings`, { model: 'c', input: 'hi' }, wide);
    expect(rescued.status).toBe(200);
    expect(byModel.s!.stats.requests).toBe(1);
  });

  it("duplicates in a request's own fallbacks: each model once, one attempt budget for the chain", async () => {
    const { gateway, byModel } = await setup(['a', 'b'], { retry: { maxAttempts: 3 } });
    byModel.a!.setFault('http_503', 'a');
    byModel.b!.setFault('http_503', 'b');
    const res = await post(`${gateway.url}/v1/chat/completions`, {
      model: 'a',
      messages,
      max_tokens: TOKENS,
      fallbacks: ['b', 'a', 'b', 'a', 'b', 'a', 'b', 'a'],
    });
    expect(res.status).toBe(503);
    // a, then b, each with its own retries: 3 + 3 (the old chain walked 9 models, 27 attempts).
    expect(byModel.a!.stats.requests).toBe(3);
    expect(byModel.b!.stats.requests).toBe(3);
  });

  it('duplicates in a configured chain too, the model itself among them', async () => {
    const { gateway, byModel } = await setup(['a', 'b'], {
      retry: { maxAttempts: 2 },
      models: { a: { fallbacks: ['a', 'b', 'b', 'a', 'b'] } },
    });
    byModel.a!.setFault('http_503', 'a');
    byModel.b!.setFault('http_503', 'b');
    const res = await post(`${gateway.url}/v1/chat/completions`, {
      model: 'a',
      messages,
      max_tokens: TOKENS,
    });
    expect(res.status).toBe(503);
    expect(byModel.a!.stats.requests).toBe(2);
    expect(byModel.b!.stats.requests).toBe(2);
  });

  it('retry.maxChainAttempts: twice retry.maxAttempts by default, at least 1', () => {
    expect(parseConfig({}).retry.maxChainAttempts).toBe(6);
    expect(parseConfig({ retry: { maxAttempts: 4 } }).retry.maxChainAttempts).toBe(8);
    expect(parseConfig({ retry: { maxChainAttempts: 2 } }).retry.maxChainAttempts).toBe(2);
    expect(() => parseConfig({ retry: { maxChainAttempts: 0 } })).toThrow(/maxChainAttempts/);
  });

  it('retry.maxChainAttempts bounds the whole chain, each model reached while it lasts', async () => {
    const models = ['m0', 'm1', 'm2', 'm3', 'm4'];
    const { gateway, byModel } = await setup(models, {
      retry: { maxAttempts: 3, maxChainAttempts: 4 },
    });
    for (const m of models) byModel[m]!.setFault('http_503', m);
    const res = await post(`${gateway.url}/v1/chat/completions`, {
      model: 'm0',
      messages,
      max_tokens: TOKENS,
      fallbacks: models.slice(1),
    });
    expect(res.status).toBe(503);
    // Four attempts in all, one on each of the first four models (none left for its own retries).
    expect(models.map((m) => byModel[m]!.stats.requests)).toEqual([1, 1, 1, 1, 0]);
    // A single fallback keeps its retries: the primary's 3 and the fallback's 3 within 6 (the default).
    const { gateway: other, byModel: pair } = await setup(['p', 'q'], { retry: { maxAttempts: 3 } });
    pair.p!.setFault('http_503', 'p');
    pair.q!.setFault('http_503,once', 'q');
    const rescued = await post(`${other.url}/v1/chat/completions`, {
      model: 'p',
      messages,
      max_tokens: TOKENS,
      fallbacks: ['q'],
    });
    expect(rescued.status).toBe(200);
    expect(rescued.headers.get('x-sluice-model')).toBe('q');
    expect([pair.p!.stats.requests, pair.q!.stats.requests]).toEqual([3, 2]);
  });

  it("a chain of 429s with Retry-After ends within the request's deadline, not after every wait", async () => {
    const deadlineMs = 1_500;
    const { gateway, byModel } = await setup(['a', 'b'], {
      retry: { maxAttempts: 3, maxRetryAfterMs: 5_000 },
      timeouts: { deadlineMs },
    });
    byModel.a!.setFault('http_429:1', 'a');
    byModel.b!.setFault('http_429:1', 'b');
    const started = performance.now();
    const res = await post(`${gateway.url}/v1/chat/completions`, {
      model: 'a',
      messages,
      max_tokens: TOKENS,
      fallbacks: ['b', 'a', 'b', 'a', 'b', 'a', 'b', 'a'],
    });
    const elapsed = performance.now() - started;
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(elapsed).toBeLessThan(deadlineMs * 1.5);
    expect(byModel.a!.stats.requests + byModel.b!.stats.requests).toBeLessThanOrEqual(6);
  });
});
