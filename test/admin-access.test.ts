import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { startGateway, startMocks } from './helpers/gateway.js';

/**
 * The admin API and the dashboard are reached only with the admin key, however the URL is
 * spelled. The router decodes and matches paths its own way; a check made on the raw URL's
 * prefix let `/%61dmin/keys` through (200, the list of keys). Every route under /admin and
 * /dashboard, as the gateway itself lists them, is tried with every spelling below, without a
 * key, with a wrong one, and with the right one: any spelling that reaches a route with the key
 * must be refused (401) without it, and none may answer 2xx without it.
 */

const ADMIN = 'admin-key-for-access-tests-0123456789';
const MODEL = 'mock-model';

interface Answer {
  status: number;
  code: string | undefined;
  body: string;
}

/** One raw HTTP request: the path is sent byte for byte (fetch would normalise `/./`, `..`, `%2e`). */
function send(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<Answer> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method,
        path,
        headers: {
          ...headers,
          ...(body !== undefined
            ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) }
            : {}),
        },
      },
      (res) => {
        const status = res.statusCode ?? 0;
        // The dashboard's event stream never ends: its head is the answer.
        if (/event-stream/.test(String(res.headers['content-type']))) {
          res.destroy();
          resolve({ status, code: undefined, body: '' });
          return;
        }
        const parts: Buffer[] = [];
        res.on('data', (chunk: Buffer) => parts.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(parts).toString('utf8');
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
          } catch {}
          resolve({ status, code, body: text });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The gateway's routes as fastify prints them (`printRoutes({ commonPrefix: false })`), with their methods. */
function routesOf(printed: string): { path: string; methods: string[] }[] {
  const out: { path: string; methods: string[] }[] = [];
  const stack: { depth: number; path: string }[] = [];
  for (const line of printed.split('\n')) {
    const match =
      /^([│\s├└─]*?)([├└]── )(\S+) \(([^)]+)\)$/.exec(line) ?? /^([│\s├└─]*?)([├└]── )(\S+)$/.exec(line);
    if (!match) continue;
    const depth = match[1]!.length;
    while (stack.length > 0 && stack[stack.length - 1]!.depth >= depth) stack.pop();
    const path = (stack[stack.length - 1]?.path ?? '') + match[3]!;
    stack.push({ depth, path });
    if (match[4]) out.push({ path, methods: match[4].split(',').map((m) => m.trim()) });
  }
  return out;
}

const encodeChar = (c: string) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`;

/** Every spelling of `path` (canonical, `/admin/...` or `/dashboard...`) an attacker would try. */
function spellings(path: string): string[] {
  const [, first, rest = ''] = /^\/([^/]+)(.*)$/.exec(path)!;
  const out = new Set<string>([
    path,
    // Percent-encoded letters, lower and upper-case hex, in the first segment and later ones.
    `/${encodeChar(first![0]!)}${first!.slice(1)}${rest}`,
    `/${encodeChar(first![0]!).toUpperCase()}${first!.slice(1)}${rest}`,
    `/${[...first!].map(encodeChar).join('')}${rest}`,
    `/${first}${rest.replace(/[a-z]/, (c) => encodeChar(c))}`,
    // Double encoding.
    `/%25${first!.charCodeAt(0).toString(16)}${first!.slice(1)}${rest}`,
    // Case.
    `/${first!.toUpperCase()}${rest}`,
    `/${first![0]!.toUpperCase()}${first!.slice(1)}${rest}`,
    // Slashes and dot segments.
    `//${first}${rest}`,
    `/${first}/${rest}`,
    `/./${first}${rest}`,
    `/${first}/.${rest}`,
    `/v1/../${first}${rest}`,
    `/v1/%2e%2e/${first}${rest}`,
    `/${first}${rest}/.`,
    // Semicolons (path parameters in some routers).
    `/${first};${rest}`,
    `/${first}${rest};x=1`,
    `/${first};/..${rest}`,
    // Trailing slash, encoded slashes, a query, a fragment-like suffix.
    `${path}/`,
    `/${first}${rest.replace('/', '%2F')}`,
    `/${first}${rest.replace('/', '%2f')}`,
    `/${first}%2F${rest.slice(1)}`,
    `${path}?`,
    `${path}?key=wrong-key-0123456789`,
    `${path}%23`,
  ]);
  return [...out];
}

/** A concrete path of a route pattern: ids that exist nowhere, the mock's model. */
const concrete = (pattern: string) =>
  pattern.replace(':model', MODEL).replace(':itemId', 'item_nope').replace(':id', 'nope');

/**
 * The router found no route for this spelling: it cannot have reached an admin handler. A HEAD
 * answer has no body to tell an unknown URL from an unknown id: its GET twin tells (see below).
 */
const unrouted = (a: Answer, method: string) =>
  (a.status === 404 && (a.code === 'unknown_url' || method === 'HEAD')) ||
  (a.status === 400 && a.code === 'invalid_url');

describe('the admin API and the dashboard, however their URLs are spelled', () => {
  let worker: MockWorker;
  let gateway: Gateway;
  let routes: { path: string; methods: string[] }[];

  beforeAll(async () => {
    [worker] = (await startMocks(1)) as [MockWorker];
    gateway = await startGateway({ auth: { adminKey: ADMIN }, workers: [{ id: 'w1', url: worker.url }] });
    routes = routesOf(gateway.app.printRoutes({ commonPrefix: false })).filter((r) =>
      /^\/(admin|dashboard)(\/|$)/.test(r.path),
    );
  });
  afterAll(async () => {
    await gateway.close();
    await worker.close();
  });

  it('lists every admin and dashboard route (the routes tried below)', () => {
    const listed = routes.flatMap((r) => r.methods.map((m) => `${m} ${r.path}`));
    for (const expected of [
      'GET /admin/keys',
      'POST /admin/keys',
      'GET /admin/keys/:id/usage',
      'DELETE /admin/keys/:id',
      'GET /admin/workers',
      'POST /admin/workers',
      'DELETE /admin/workers/:id',
      'POST /admin/models/:model/sleep',
      'GET /admin/models/:model/is_sleeping',
      'GET /dashboard',
      'GET /dashboard/data',
      'GET /dashboard/events',
      'HEAD /admin/keys',
    ]) {
      expect(listed).toContain(expected);
    }
  });

  it('no spelling of any admin or dashboard route answers without the admin key, GET, HEAD, POST and DELETE', async () => {
    const base = gateway.url;
    const failures: string[] = [];
    let reachedWithKey = 0;
    let encodedReached = 0;
    // Without any key and with a wrong one first: nothing may have been created by them.
    const withoutKey = new Map<string, Answer>();
    for (const route of routes) {
      for (const method of route.methods) {
        const body = method === 'POST' ? '{}' : undefined;
        for (const path of spellings(concrete(route.path))) {
          const none = await send(base, method, path, {}, body);
          const wrong = await send(
            base,
            method,
            path,
            { authorization: 'Bearer wrong-key-0123456789' },
            body,
          );
          withoutKey.set(`${method} ${path}`, none);
          for (const [who, answer] of [
            ['no key', none],
            ['a wrong key', wrong],
          ] as const) {
            if (answer.status < 300 || (answer.status !== 401 && !unrouted(answer, method)))
              failures.push(`${method} ${path} with ${who}: ${answer.status} ${answer.body.slice(0, 80)}`);
          }
        }
      }
    }
    // Nothing happened: no key made, no worker registered, the worker not put to sleep.
    const keys = await send(base, 'GET', '/admin/keys', { authorization: `Bearer ${ADMIN}` });
    expect(JSON.parse(keys.body)).toEqual({ object: 'list', data: [] });
    const workers = await send(base, 'GET', '/admin/workers', { authorization: `Bearer ${ADMIN}` });
    expect((JSON.parse(workers.body) as { data: unknown[] }).data).toHaveLength(1);
    expect(worker.stats.utilityCalls).toEqual([]);

    // With the key: every spelling the router maps to an admin route was refused above with a 401.
    const withKey = new Map<string, Answer>();
    for (const route of routes) {
      for (const method of route.methods) {
        const body = method === 'POST' ? '{}' : undefined;
        for (const path of spellings(concrete(route.path))) {
          const answer = await send(base, method, path, { authorization: `Bearer ${ADMIN}` }, body);
          withKey.set(`${method} ${path}`, answer);
          // A HEAD reaches its route when its GET does.
          const routed = method === 'HEAD' ? withKey.get(`GET ${path}`) : answer;
          if (routed === undefined || unrouted(routed, 'GET')) continue;
          reachedWithKey++;
          if (path.includes('%')) encodedReached++;
          const none = withoutKey.get(`${method} ${path}`)!;
          if (none.status !== 401)
            failures.push(
              `${method} ${path} reaches a route (${answer.status} with the key) but answered ${none.status} without it`,
            );
        }
      }
    }
    expect(failures).toEqual([]);
    // The spellings did reach routes: encoded ones among them (the router decodes them).
    expect(reachedWithKey).toBeGreaterThan(routes.length);
    expect(encodedReached).toBeGreaterThan(0);
  });

  it('the dashboard takes ?key= and the admin API does not', async () => {
    const base = gateway.url;
    expect((await send(base, 'GET', `/dashboard/data?key=${ADMIN}`)).status).toBe(200);
    expect((await send(base, 'GET', `/%64ashboard/data?key=${ADMIN}`)).status).toBe(200);
    expect((await send(base, 'GET', `/admin/keys?key=${ADMIN}`)).status).toBe(401);
    expect((await send(base, 'GET', `/%61dmin/keys?key=${ADMIN}`)).status).toBe(401);
  });
});

describe('every other decision made on a path is made on the route', () => {
  let worker: MockWorker;
  let gateway: Gateway;
  let key: string;

  beforeAll(async () => {
    [worker] = (await startMocks(1)) as [MockWorker];
    gateway = await startGateway({ auth: { adminKey: ADMIN }, workers: [{ id: 'w1', url: worker.url }] });
    const created = await send(
      gateway.url,
      'POST',
      '/admin/keys',
      { authorization: `Bearer ${ADMIN}` },
      '{}',
    );
    key = (JSON.parse(created.body) as { key: string }).key;
  });
  afterAll(async () => {
    await gateway.close();
    await worker.close();
  });

  const chat = JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
  const messages = JSON.stringify({
    model: MODEL,
    max_tokens: 2,
    messages: [{ role: 'user', content: 'hi' }],
  });
  const responses = JSON.stringify({ model: MODEL, max_output_tokens: 2, input: 'hi' });

  it('a generation path spelled otherwise still needs its key (the framework-free route takes only exact paths)', async () => {
    for (const [path, body] of [
      ['/v1/chat/completions', chat],
      ['/v1/%63hat/completions', chat],
      ['/%761/chat/completions', chat],
      ['/v1/chat/completions?', chat],
      ['/v1/%72esponses', responses],
      ['/v1/responses?x=1', responses],
      ['/v1/%6dessages', messages],
      ['/v1/messages?beta=true', messages],
    ] as const) {
      const none = await send(gateway.url, 'POST', path, {}, body);
      expect(none.status, path).toBe(401);
      const ok = await send(gateway.url, 'POST', path, { authorization: `Bearer ${key}` }, body);
      expect(ok.status, path).toBe(200);
    }
    // Anthropic's path answers in Anthropic's shape however it is spelled.
    const anthropic = await send(gateway.url, 'POST', '/v1/%6dessages', {}, messages);
    expect(JSON.parse(anthropic.body)).toMatchObject({
      type: 'error',
      error: { type: 'authentication_error' },
    });
    for (const path of ['/v1/models', '/v1/%6dodels', '/%761/models']) {
      expect((await send(gateway.url, 'GET', path)).status, path).toBe(401);
    }
  });

  it('while draining, health and metrics answer however spelled, and every other route is a 503 in its own shape', async () => {
    // What shutdown sets first (gateway.shutdown), held for the test's requests.
    (gateway.context.lifecycle as { draining: boolean }).draining = true;
    const inject = (method: 'GET' | 'POST', url: string, payload?: string) =>
      gateway.app.inject({
        method,
        url,
        ...(payload
          ? { payload, headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` } }
          : {}),
      });
    for (const path of ['/health', '/%68ealth', '/metrics', '/%6detrics']) {
      expect((await inject('GET', path)).statusCode, path).toBe(200);
    }
    for (const path of ['/health/ready', '/%68ealth/ready']) {
      expect((await inject('GET', path)).statusCode, path).toBe(503);
    }
    const late = await inject('POST', '/v1/%63hat/completions', chat);
    expect(late.statusCode).toBe(503);
    expect(late.headers.connection).toBe('close');
    expect(late.json()).toMatchObject({ error: { code: 'gateway_shutting_down' } });
    const lateMessages = await inject('POST', '/v1/%6dessages', messages);
    expect(lateMessages.statusCode).toBe(503);
    expect(lateMessages.headers.connection).toBe('close');
    expect(lateMessages.json()).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });
    (gateway.context.lifecycle as { draining: boolean }).draining = false;
  });
});
