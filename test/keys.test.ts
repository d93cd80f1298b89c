import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, post, sseData, startGateway, startMocks } from './helpers/gateway.js';

const ADMIN = 'admin-key-for-tests-0123456789';

interface CreatedKey {
  id: string;
  key: string;
  prefix: string;
  models: string[] | null;
}

describe('API keys, limits and header hygiene', () => {
  let workers: MockWorker[];
  let gateway: Gateway;
  const admin = (path: string, init: RequestInit = {}) =>
    fetch(`${gateway.url}/admin${path}`, {
      ...init,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}`, ...init.headers },
    });
  const createKey = async (body: Record<string, unknown>): Promise<CreatedKey> => {
    const res = await admin('/keys', { method: 'POST', body: JSON.stringify(body) });
    expect(res.status).toBe(201);
    return (await res.json()) as CreatedKey;
  };
  const chat = (
    key: string | undefined,
    extra: Record<string, unknown> = {},
    headers: Record<string, string> = {},
  ) =>
    post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 3, ...extra }), {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...headers,
    });

  beforeAll(async () => {
    workers = await startMocks(1, { models: ['mock-model', 'other-model'] });
    gateway = await startGateway({
      auth: { adminKey: ADMIN },
      server: { forwardHeaders: ['x-mock-*', 'x-allowed'] },
      workers: [{ url: workers[0]!.url, apiKey: 'worker-secret' }],
    });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  it('the admin API needs the admin key', async () => {
    expect((await fetch(`${gateway.url}/admin/workers`)).status).toBe(401);
    const wrong = await fetch(`${gateway.url}/admin/workers`, { headers: { authorization: 'Bearer nope' } });
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as { error: { code: string } }).error.code).toBe('invalid_api_key');
    expect((await admin('/workers')).status).toBe(200);
    expect((await fetch(`${gateway.url}/dashboard/data?key=${ADMIN}`)).status).toBe(200);
    expect((await fetch(`${gateway.url}/dashboard/data`)).status).toBe(401);
  });

  it('the admin key as ?key= opens the dashboard only, never the admin API', async () => {
    for (const path of ['/dashboard', '/dashboard/data', '/dashboard/events']) {
      const res = await fetch(`${gateway.url}${path}?key=${ADMIN}`);
      expect(res.status, path).toBe(200);
      await res.body?.cancel();
    }
    for (const path of ['/admin/workers', '/admin/keys', '/admin/models/mock-model/is_sleeping']) {
      const res = await fetch(`${gateway.url}${path}?key=${ADMIN}`);
      expect(res.status, path).toBe(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('invalid_api_key');
    }
    const created = await fetch(`${gateway.url}/admin/keys?key=${ADMIN}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(created.status).toBe(401);
    // The same key as a Bearer token opens them.
    expect((await admin('/workers')).status).toBe(200);
  });

  it('with no key the gateway runs open; the first key closes it', async () => {
    expect((await chat(undefined)).status).toBe(200);
    const created = await createKey({ name: 'team-a', models: ['mock-model'], rpm: 1000 });
    expect(created.key).toMatch(/^sk-sluice-[A-Za-z0-9]{40}$/);
    expect(created.key.startsWith(created.prefix)).toBe(true);
    const missing = await chat(undefined);
    expect(missing.status).toBe(401);
    expect(missing.json()).toMatchObject({
      error: { code: 'invalid_api_key', type: 'authentication_error' },
    });
    expect((await chat('sk-sluice-wrong')).status).toBe(401);
    const ok = await chat(created.key);
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-ratelimit-limit-requests')).toBe('1000');
    expect(Number(ok.headers.get('x-ratelimit-remaining-requests'))).toBeLessThan(1000);
    const notAllowed = await chat(created.key, { model: 'other-model' });
    expect(notAllowed.status).toBe(403);
    expect((notAllowed.json() as { error: { code: string } }).error.code).toBe('model_not_allowed');
    const models = (await (
      await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${created.key}` } })
    ).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(['mock-model']);
  });

  it('keys are stored hashed and never shown again', async () => {
    const created = await createKey({ models: null });
    const listed = await (await admin('/keys')).text();
    expect(listed).not.toContain(created.key);
    expect(listed).toContain(created.prefix);
    const one = (await (await admin(`/keys/${created.id}`)).json()) as Record<string, unknown>;
    expect(one.key).toBeUndefined();
    const stored = await gateway.context.access.keys!.get(created.id);
    expect(stored!.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(stored)).not.toContain(created.key);
    const bad = await admin('/keys', { method: 'POST', body: JSON.stringify({ rpm: -3 }) });
    expect(bad.status).toBe(400);
  });

  it('over the requests-per-minute limit: 429 with Retry-After and x-ratelimit-* headers', async () => {
    const { key } = await createKey({ rpm: 2 });
    expect((await chat(key)).status).toBe(200);
    expect((await chat(key)).status).toBe(200);
    const refused = await chat(key);
    expect(refused.status).toBe(429);
    expect(refused.json()).toMatchObject({
      error: { code: 'rate_limit_exceeded', type: 'rate_limit_error' },
    });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(refused.headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(refused.headers.get('x-ratelimit-reset-requests')).toMatch(/\d+(ms|s)$/);
  });

  it('tokens per minute and a token budget use the engine’s usage, forced on upstream', async () => {
    const limited = await createKey({ tpm: 10 });
    // A stream whose client did not ask for usage: the gateway asks the engine, the client does not see it.
    const streamed = await chat(limited.key, { stream: true, max_tokens: 12 });
    expect(streamed.status).toBe(200);
    expect(sseData(streamed.text).some((e) => e.includes('"usage"'))).toBe(false);
    expect(sseData(streamed.text).at(-1)).toBe('[DONE]');
    const sent = workers[0]!.stats.lastBodies.at(-1) as { stream_options: { include_usage: boolean } };
    expect(sent.stream_options.include_usage).toBe(true);
    const refused = await chat(limited.key);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-ratelimit-remaining-tokens')).toBe('0');

    const budget = await createKey({ budget_tokens: 5 });
    expect((await chat(budget.key, { max_tokens: 4 })).status).toBe(200);
    const exhausted = await chat(budget.key);
    expect(exhausted.status).toBe(429);
    expect((exhausted.json() as { error: { code: string } }).error.code).toBe('insufficient_quota');
    const usage = (await (await admin(`/keys/${budget.id}/usage`)).json()) as Record<string, number>;
    expect(usage).toMatchObject({ requests: 1, completion_tokens: 4, budget_left: 0 });
    expect(usage.prompt_tokens).toBeGreaterThan(0);
    expect(usage.total_tokens).toBe(usage.prompt_tokens! + 4);
  });

  it('the client Authorization never goes upstream; the worker’s own key does; only allowed headers pass', async () => {
    const { key } = await createKey({});
    await chat(key, {}, { 'x-allowed': 'yes', 'x-denied': 'no', 'x-request-id': 'hygiene-1', cookie: 'c=1' });
    const index = workers[0]!.stats.requestIds.lastIndexOf('hygiene-1');
    const headers = workers[0]!.stats.lastHeaders.at(index - workers[0]!.stats.requestIds.length) as Record<
      string,
      string
    >;
    expect(headers.authorization).toBe('Bearer worker-secret');
    expect(JSON.stringify(headers)).not.toContain(key);
    expect(headers['x-allowed']).toBe('yes');
    expect(headers['x-denied']).toBeUndefined();
    expect(headers.cookie).toBeUndefined();
  });

  it('a deleted key stops working', async () => {
    const created = await createKey({});
    expect((await chat(created.key)).status).toBe(200);
    expect((await admin(`/keys/${created.id}`, { method: 'DELETE' })).status).toBe(200);
    expect((await chat(created.key)).status).toBe(401);
    expect((await admin(`/keys/${created.id}`)).status).toBe(404);
  });
  it('stored responses and conversations belong to the key that made them', async () => {
    const [a, b] = [await createKey({}), await createKey({})];
    const call = (key: string, method: string, path: string, body?: unknown) =>
      fetch(`${gateway.url}/v1${path}`, {
        method,
        headers: {
          authorization: `Bearer ${key}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const codeOf = async (res: Response) => ((await res.json()) as { error: { code: string } }).error.code;

    const created = await call(a.key, 'POST', '/responses', {
      model: 'mock-model',
      input: 'hi',
      max_output_tokens: 3,
    });
    expect(created.status).toBe(200);
    const responseId = ((await created.json()) as { id: string }).id;
    const conv = await call(a.key, 'POST', '/conversations', {
      items: [{ role: 'user', content: 'remember' }],
    });
    expect(conv.status).toBe(200);
    const conversationId = ((await conv.json()) as { id: string }).id;

    // Another key learns nothing, exactly as for ids that do not exist.
    for (const [method, path, body] of [
      ['GET', `/responses/${responseId}`],
      ['GET', `/responses/${responseId}?stream=true`],
      ['GET', `/responses/${responseId}/input_items`],
      ['POST', `/responses/${responseId}/cancel`],
      ['DELETE', `/responses/${responseId}`],
      ['GET', `/conversations/${conversationId}`],
      ['POST', `/conversations/${conversationId}`, { metadata: { x: 'y' } }],
      ['GET', `/conversations/${conversationId}/items`],
      ['POST', `/conversations/${conversationId}/items`, { items: [{ role: 'user', content: 'x' }] }],
      ['DELETE', `/conversations/${conversationId}`],
    ] as const) {
      const res = await call(b.key, method, path, body);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(await codeOf(res)).toMatch(/^(response|conversation)_not_found$/);
    }
    const chained = await call(b.key, 'POST', '/responses', {
      model: 'mock-model',
      input: 'more',
      previous_response_id: responseId,
    });
    expect(chained.status).toBe(404);
    expect(await codeOf(chained)).toBe('previous_response_not_found');
    const inConversation = await call(b.key, 'POST', '/responses', {
      model: 'mock-model',
      input: 'more',
      conversation: conversationId,
    });
    expect(inConversation.status).toBe(404);
    expect(await codeOf(inConversation)).toBe('conversation_not_found');

    // The owner still has all of it, untouched by the other key's attempts.
    expect((await call(a.key, 'GET', `/responses/${responseId}`)).status).toBe(200);
    const items = await call(a.key, 'GET', `/conversations/${conversationId}/items`);
    expect(((await items.json()) as { data: unknown[] }).data).toHaveLength(1);
    const next = await call(a.key, 'POST', '/responses', {
      model: 'mock-model',
      input: 'more',
      previous_response_id: responseId,
      max_output_tokens: 3,
    });
    expect(next.status).toBe(200);
    expect((await call(a.key, 'DELETE', `/responses/${responseId}`)).status).toBe(200);
  });
});

describe('what was stored while the gateway ran open', () => {
  let workers: MockWorker[];
  let gateway: Gateway;
  const call = (key: string | undefined, method: string, path: string, body?: unknown) =>
    fetch(`${gateway.url}${path}`, {
      method,
      headers: {
        ...(key ? { authorization: `Bearer ${key}` } : {}),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });

  beforeAll(async () => {
    workers = await startMocks(1);
    gateway = await startGateway({ auth: { adminKey: ADMIN }, workers: [{ url: workers[0]!.url }] });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  it('is read by no key once keys exist, and by everyone again once the gateway is open again', async () => {
    const made = await call(undefined, 'POST', '/v1/responses', {
      model: 'mock-model',
      input: 'a secret prompt',
      max_output_tokens: 3,
    });
    expect(made.status).toBe(200);
    const responseId = ((await made.json()) as { id: string }).id;
    const conv = await call(undefined, 'POST', '/v1/conversations', {
      items: [{ role: 'user', content: 'x' }],
    });
    const conversationId = ((await conv.json()) as { id: string }).id;

    const createdKey = await call(ADMIN, 'POST', '/admin/keys', {});
    expect(createdKey.status).toBe(201);
    const key = (await createdKey.json()) as CreatedKey;
    for (const [method, path] of [
      ['GET', `/v1/responses/${responseId}`],
      ['GET', `/v1/responses/${responseId}/input_items`],
      ['DELETE', `/v1/responses/${responseId}`],
      ['GET', `/v1/conversations/${conversationId}/items`],
    ] as const) {
      const res = await call(key.key, method, path);
      expect(res.status, `${method} ${path}`).toBe(404);
    }
    const chained = await call(key.key, 'POST', '/v1/responses', {
      model: 'mock-model',
      input: 'what did I say?',
      previous_response_id: responseId,
    });
    expect(chained.status).toBe(404);

    // The last key deleted: the gateway is open again, and so is what it stored then.
    expect((await call(ADMIN, 'DELETE', `/admin/keys/${key.id}`)).status).toBe(200);
    const open = await call(undefined, 'GET', `/v1/responses/${responseId}`);
    expect(open.status).toBe(200);
  });
});
