import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { EVIL_MODEL, type EvilEngine, startEvilEngine } from './helpers/evil-engine.js';
import { metricOrZero, perTest, post, sseData } from './helpers/gateway.js';

/**
 * Issue 28, part 11: a usage-only chunk (`choices: []` with `usage`) shows the client nothing of
 * its answer. A stream that fails after one is retried like one that sent nothing (docs/STREAMS.md
 * section 1), then answered 502 when every attempt failed, with nothing stored.
 */
const fixture = perTest();
const engines: EvilEngine[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function setup(modes: string[]) {
  const started = await Promise.all(modes.map((mode) => startEvilEngine(mode)));
  engines.push(...started);
  const dir = mkdtempSync(join(tmpdir(), 'sluice-usage-'));
  dirs.push(dir);
  const path = join(dir, 'sluice.db');
  const gateway = await fixture.gateway({
    workers: started.map((e, i) => ({ url: e.url, id: `evil-${i}`, models: [EVIL_MODEL] })),
    routing: { policy: 'round_robin' },
    retry: { maxAttempts: modes.length },
    breaker: { failureThreshold: 1000 },
    storage: { kind: 'sqlite', path },
  });
  const storedCount = () => {
    const db = new Database(path, { readonly: true });
    try {
      return (db.prepare('SELECT count(*) AS n FROM responses').get() as { n: number }).n;
    } finally {
      db.close();
    }
  };
  return { url: gateway.url, engines: started, storedCount };
}

const chat = { model: EVIL_MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true };
const FULL_TEXT = 't0 t1 t2 t3 t4 ';

describe('a usage-only first chunk, then a reset', () => {
  it('chat: retried on another worker; the client gets one whole answer', async () => {
    const { url, engines: started } = await setup(['usage_reset', 'ok']);
    const res = await post(`${url}/v1/chat/completions`, chat);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-worker')).toBe('evil-1');
    const data = sseData(res.text);
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data
      .slice(0, -1)
      .map((d) => JSON.parse(d) as { choices: { delta: { content?: string } }[]; usage?: unknown });
    // Nothing of the failed attempt is relayed: no usage chunk from it, no error frame.
    expect(chunks.every((c) => c.usage === undefined)).toBe(true);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(FULL_TEXT);
    expect(started[0]!.stats.requests).toBe(1);
    expect(
      await metricOrZero(url, 'sluice_stream_failures_total', { api: 'chat_completions', model: EVIL_MODEL }),
    ).toBe(0);
  });

  it('chat: every attempt failing is a 502 request_stream_closed, which the openai SDK throws', async () => {
    const { url, engines: started } = await setup(['usage_reset', 'usage_reset']);
    const res = await post(`${url}/v1/chat/completions`, chat);
    expect(res.status).toBe(502);
    expect((res.json() as { error: { code: string } }).error.code).toBe('request_stream_closed');
    expect(started.map((e) => e.stats.requests)).toEqual([1, 1]);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const error = await client.chat.completions
      .create({ ...chat, stream: true } as OpenAI.ChatCompletionCreateParamsStreaming)
      .catch((err: unknown) => err);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
  });

  it('Responses: retried on another worker; one whole response, stored completed', async () => {
    const { url, storedCount } = await setup(['usage_reset', 'ok']);
    const res = await post(`${url}/v1/responses`, { model: EVIL_MODEL, input: 'hi', stream: true });
    expect(res.status).toBe(200);
    const events = sseData(res.text).map(
      (d) => JSON.parse(d) as { type: string; response?: { id: string; status: string; output: unknown[] } },
    );
    const last = events.at(-1)!;
    expect(last.type).toBe('response.completed');
    expect(events.filter((e) => e.type === 'response.created')).toHaveLength(1);
    const done = events.find((e) => e.type === 'response.output_text.done') as unknown as { text: string };
    expect(done.text).toBe(FULL_TEXT);
    const stored = (await (await fetch(`${url}/v1/responses/${last.response!.id}`)).json()) as {
      status: string;
    };
    expect(stored.status).toBe('completed');
    expect(storedCount()).toBe(1);
  });

  it('Responses: every attempt failing is a 502 before any event, and nothing is stored', async () => {
    const { url, storedCount } = await setup(['usage_reset', 'usage_reset']);
    const res = await post(`${url}/v1/responses`, { model: EVIL_MODEL, input: 'hi', stream: true });
    expect(res.status).toBe(502);
    expect(res.headers.get('content-type')).toMatch(/application\/json/);
    expect((res.json() as { error: { code: string } }).error.code).toBe('request_stream_closed');
    expect(storedCount()).toBe(0);
  });
});
