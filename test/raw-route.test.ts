import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { chatBody, perTest, post, sseData } from './helpers/gateway.js';

/**
 * The generation paths' usual requests (POST, exact path, JSON body of a known length) are served
 * without the web framework (src/api/raw-json-route.ts); everything else goes through fastify with
 * the same handlers. A query string makes the framework-free route decline, so `?via=fastify` is
 * the same request served by fastify: both ways must answer alike.
 */
describe('the framework-free generation route answers as the fastify route does', () => {
  const fx = perTest();

  async function setup(bodyLimitBytes?: number) {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({
      workers: workers.map((w) => ({ url: w.url })),
      ...(bodyLimitBytes === undefined ? {} : { server: { bodyLimitBytes } }),
    });
    return gateway;
  }

  /** What must not differ between the two ways in: status, content type, and the body with its ids left out. */
  function shape(answer: { status: number; headers: Headers; text: string }) {
    const type = answer.headers.get('content-type');
    let body: unknown = answer.text;
    if (type?.startsWith('application/json')) {
      const json = JSON.parse(answer.text) as Record<string, unknown>;
      body =
        'error' in json
          ? json
          : { object: json.object, finish: (json.choices as { finish_reason: unknown }[])[0]?.finish_reason };
    } else if (type?.startsWith('text/event-stream')) {
      body = sseData(answer.text).map((d) =>
        d === '[DONE]'
          ? d
          : Object.keys(JSON.parse(d) as object)
              .sort()
              .join(','),
      );
    }
    return { status: answer.status, type, body, requestId: answer.headers.get('x-request-id') !== null };
  }

  type Answer = Awaited<ReturnType<typeof post>>;

  /**
   * For the APIs whose streams are named events (Messages, Responses): status, content type,
   * whether `idHeader` is there, and the body as `json` reduces it, or a stream's event names.
   */
  function namedEventShape(
    answer: Answer,
    idHeader: string,
    json: (body: Record<string, unknown>) => unknown,
  ) {
    const type = answer.headers.get('content-type');
    let body: unknown = answer.text;
    if (type?.startsWith('application/json')) body = json(JSON.parse(answer.text) as Record<string, unknown>);
    else if (type?.startsWith('text/event-stream')) {
      body = [...answer.text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    }
    return { status: answer.status, type, body, requestId: answer.headers.get(idHeader) !== null };
  }

  /** Sends each case both ways, expects the same shape, and returns the framework-free answers. */
  async function bothWays(
    url: string,
    cases: [string, string | Record<string, unknown>][],
    shapeOf: (answer: Answer) => unknown,
  ): Promise<Map<string, Answer>> {
    const answers = new Map<string, Answer>();
    for (const [name, body] of cases) {
      const raw = await post(url, body);
      const framework = await post(`${url}?via=fastify`, body);
      expect(shapeOf(raw), name).toEqual(shapeOf(framework));
      expect(raw.text, name).not.toContain('Unknown request URL');
      answers.set(name, raw);
    }
    return answers;
  }

  it('answers, refusals and errors are the same both ways', async () => {
    const gateway = await setup();
    const cases: [string, string | Record<string, unknown>][] = [
      ['a whole answer', chatBody({ max_tokens: 3 })],
      ['a stream', chatBody({ max_tokens: 3, stream: true })],
      ['a completion', { model: 'mock-model', prompt: 'hi', max_tokens: 2 }],
      ['not JSON', '{"model": "mock-model", "messages": ['],
      ['a JSON array', '[1, 2]'],
      ['too deeply nested', `{"model":"mock-model","messages":${'['.repeat(200)}${']'.repeat(200)}}`],
      ['no messages', { model: 'mock-model' }],
      ['a bad temperature', chatBody({ temperature: 7 })],
      ['an unknown model', chatBody({ model: 'no-such-model' })],
    ];
    for (const [name, body] of cases) {
      const path = name === 'a completion' ? '/v1/completions' : '/v1/chat/completions';
      const raw = await post(`${gateway.url}${path}`, body);
      const framework = await post(`${gateway.url}${path}?via=fastify`, body);
      expect(shape(raw), name).toEqual(shape(framework));
      expect(raw.text, name).not.toContain('Unknown request URL');
      expect(framework.text, name).not.toContain('Unknown request URL');
    }
  });

  it("Anthropic's messages: answers, streams and errors (in Anthropic's shape) are the same both ways", async () => {
    const gateway = await setup();
    const message = (extra: Record<string, unknown> = {}) => ({
      model: 'mock-model',
      max_tokens: 3,
      messages: [{ role: 'user', content: 'hi' }],
      ...extra,
    });
    // The body with its ids left out.
    const anthropicShape = (answer: Answer) =>
      namedEventShape(answer, 'request-id', (json) =>
        json.type === 'error'
          ? { ...json, request_id: typeof json.request_id }
          : { type: json.type, role: json.role, stop_reason: json.stop_reason },
      );
    const cases: [string, string | Record<string, unknown>][] = [
      ['a whole answer', message()],
      ['a stream', message({ stream: true })],
      ['not JSON', '{"model": "mock-model", "messages": ['],
      ['a JSON array', '[1, 2]'],
      ['no max_tokens', { model: 'mock-model', messages: [{ role: 'user', content: 'hi' }] }],
      ['an unknown model', message({ model: 'no-such-model' })],
    ];
    const answers = await bothWays(`${gateway.url}/v1/messages`, cases, anthropicShape);
    for (const [name, raw] of answers) {
      if (name !== 'a whole answer' && name !== 'a stream') {
        // Anthropic's error shape, never OpenAI's.
        expect((JSON.parse(raw.text) as { type: string }).type, name).toBe('error');
        expect(raw.status, name).toBeGreaterThanOrEqual(400);
      }
    }
  });

  it('Responses: answers, streams, background and errors are the same both ways', async () => {
    const gateway = await setup();
    const create = (extra: Record<string, unknown> = {}) => ({
      model: 'mock-model',
      input: 'hi',
      max_output_tokens: 3,
      ...extra,
    });
    // The body with its ids and times left out.
    const responsesShape = (answer: Answer) =>
      namedEventShape(answer, 'x-request-id', (json) =>
        'error' in json && json.error !== null && json.object !== 'response'
          ? json
          : { object: json.object, status: json.status, keys: Object.keys(json).sort().join(',') },
      );
    const cases: [string, string | Record<string, unknown>][] = [
      ['a whole answer', create()],
      ['a stream', create({ stream: true })],
      ['not stored', create({ store: false })],
      ['background', create({ background: true })],
      ['not JSON', '{"model": "mock-model", "input": '],
      ['a JSON array', '[1, 2]'],
      ['no input', { model: 'mock-model' }],
      ['an unknown model', create({ model: 'no-such-model' })],
    ];
    await bothWays(`${gateway.url}/v1/responses`, cases, responsesShape);
  });

  it('a client X-Request-Id is kept, a bad one replaced, both ways', async () => {
    const gateway = await setup();
    for (const suffix of ['', '?via=fastify']) {
      const kept = await post(`${gateway.url}/v1/chat/completions${suffix}`, chatBody({ max_tokens: 1 }), {
        'x-request-id': 'client-id.42',
      });
      expect(kept.headers.get('x-request-id')).toBe('client-id.42');
      const replaced = await post(
        `${gateway.url}/v1/chat/completions${suffix}`,
        chatBody({ max_tokens: 1 }),
        {
          'x-request-id': 'no spaces allowed',
        },
      );
      expect(replaced.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
    }
  });

  it('a chunked body (no Content-Length) is read; past the body limit it is a 413 like a declared one', async () => {
    const gateway = await setup(4096);
    const chunked = (text: string) =>
      fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: new ReadableStream({
          start(controller) {
            const bytes = new TextEncoder().encode(text);
            // In pieces, as a client streaming its upload sends it.
            for (let at = 0; at < bytes.length; at += 1000) controller.enqueue(bytes.subarray(at, at + 1000));
            controller.close();
          },
        }),
        duplex: 'half',
      } as RequestInit);
    const ok = await chunked(JSON.stringify(chatBody({ max_tokens: 2 })));
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { object: string }).object).toBe('chat.completion');

    const big = JSON.stringify(chatBody({ messages: [{ role: 'user', content: 'x'.repeat(10_000) }] }));
    const refused = await chunked(big);
    const declared = await post(`${gateway.url}/v1/chat/completions`, big);
    expect(refused.status).toBe(413);
    expect(declared.status).toBe(413);
    expect(await refused.json()).toEqual(JSON.parse(declared.text));
  });

  it('a non-JSON content type and an empty body get the framework answers (415, 400), never a hang', async () => {
    const gateway = await setup();
    const text = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: JSON.stringify(chatBody()),
    });
    expect(text.status).toBe(415);
    expect(((await text.json()) as { error: { code: string } }).error.code).toBe('unsupported_media_type');
    const empty = await post(`${gateway.url}/v1/chat/completions`, '');
    expect(empty.status).toBe(400);
    expect((empty.json() as { error: { type: string } }).error.type).toBe('invalid_request_error');
  });
});

describe('the framework-free route with clients that misbehave', () => {
  const fx = perTest();

  /** Writes `request` on a raw socket and reads until `done` says the answer is whole (or 5 s). */
  function exchange(url: string, parts: string[], done: (text: string) => boolean): Promise<string> {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
      let text = '';
      const socket = connect(Number(port), hostname, () => {
        for (const part of parts) socket.write(part);
      });
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString('utf8');
        if (done(text)) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.on('error', reject);
      socket.setTimeout(5_000, () => {
        socket.destroy();
        reject(new Error(`no whole answer within 5 s: ${text}`));
      });
    });
  }

  const head = (json: string, extra = '') =>
    `POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(json)}\r\n${extra}\r\n`;

  it('two requests pipelined on one connection are both answered, in order', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: workers.map((w) => ({ url: w.url })) });
    const first = JSON.stringify(chatBody({ max_tokens: 1 }));
    const second = '{"model": "mock-model"';
    const text = await exchange(gateway.url, [head(first) + first + head(second) + second], (t) =>
      /HTTP\/1\.1 400[\s\S]*invalid_json/.test(t),
    );
    expect(text.indexOf('HTTP/1.1 200')).toBeGreaterThanOrEqual(0);
    expect(text.indexOf('HTTP/1.1 200')).toBeLessThan(text.indexOf('HTTP/1.1 400'));
  });

  it('Expect: 100-continue gets its 100, then the answer', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: workers.map((w) => ({ url: w.url })) });
    const json = JSON.stringify(chatBody({ max_tokens: 1 }));
    const text = await exchange(gateway.url, [head(json, 'Expect: 100-continue\r\n'), json], (t) =>
      t.includes('chat.completion'),
    );
    expect(text).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
  });

  it('a client gone mid-body reaches no engine, and the gateway goes on serving', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: workers.map((w) => ({ url: w.url })) });
    const json = JSON.stringify(chatBody({ max_tokens: 1 }));
    const { hostname, port } = new URL(gateway.url);
    await new Promise<void>((resolve) => {
      const socket = connect(Number(port), hostname, () => {
        socket.write(head(json) + json.slice(0, 20));
        setTimeout(() => {
          socket.destroy();
          resolve();
        }, 100);
      });
    });
    const after = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    expect(after.status).toBe(200);
    // Only the whole request reached the engine.
    expect(workers[0]!.stats.requests).toBe(1);
  });
});
