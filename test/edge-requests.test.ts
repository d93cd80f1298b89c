import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import OpenAI from 'openai';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { Gateway } from '../src/gateway.js';
import { chatBody, eventually, metric, metricOrZero, perTest, post, sseData } from './helpers/gateway.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** Sends `request` on a raw TCP socket, half-closes it (FIN) at once, and reads the whole answer. */
function halfClosed(url: string, request: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => {
      socket.write(request);
      socket.end();
    });
    const parts: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => parts.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(parts).toString('utf8')));
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')));
  });
}

function rawPost(path: string, body: unknown): string {
  const json = JSON.stringify(body);
  return (
    `POST ${path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(json)}\r\nConnection: keep-alive\r\n\r\n${json}`
  );
}

/** Opens a raw TCP connection, writes `head`, then stalls; resolves with what the gateway wrote and how long it held on. */
function stallAfter(url: string, head: string): Promise<{ answer: string; heldMs: number }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket: Socket = connect(Number(port), hostname, () => socket.write(head));
    const parts: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => parts.push(chunk));
    socket.on('error', reject);
    socket.on('close', () =>
      resolve({ answer: Buffer.concat(parts).toString('utf8'), heldMs: performance.now() - started }),
    );
    socket.setTimeout(10_000, () => socket.destroy(new Error('the gateway held a stalled request for 10 s')));
  });
}

describe('edge cases of client requests', () => {
  const fx = perTest();

  async function setup(extra: Parameters<typeof fx.gateway>[0] = {}) {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: workers.map((w) => ({ url: w.url })), ...extra });
    return { workers, gateway };
  }

  it('a client that half-closes its socket after the request still gets its answer (chat, Responses)', async () => {
    const { gateway } = await setup();
    const cases: [string, unknown][] = [
      ['/v1/chat/completions', chatBody({ max_tokens: 3 })],
      ['/v1/chat/completions', chatBody({ max_tokens: 3, stream: true })],
      ['/v1/responses', { model: 'mock-model', input: 'hi', max_output_tokens: 3, store: false }],
      ['/v1/responses', { model: 'mock-model', input: 'hi', max_output_tokens: 3, stream: true }],
    ];
    for (const [path, body] of cases) {
      // Interim `102 Processing` probes may come first; the final answer is a 200.
      const answer = (await halfClosed(gateway.url, rawPost(path, body))).replace(
        /^(HTTP\/1\.1 1\d\d [^\r]*\r\n\r\n)+/,
        '',
      );
      expect(answer, path).toMatch(/^HTTP\/1\.1 200 /);
      if ((body as { stream?: boolean }).stream) {
        expect(answer, path).toMatch(
          path.includes('chat') ? /data: \[DONE\]/ : /response\.(completed|incomplete)/,
        );
      } else {
        expect(answer, path).toMatch(path.includes('chat') ? /"finish_reason"/ : /"object":"response"/);
      }
    }
    expect(await metricOrZero(gateway.url, 'sluice_client_disconnects_total')).toBe(0);
    expect(await metric(gateway.url, 'sluice_requests_total', { status: '200' })).toBe(cases.length);
  });

  it('GET /v1/responses/:id?stream=true with a bad starting_after is a 400 naming it', async () => {
    const { gateway } = await setup();
    const created = (
      await post(`${gateway.url}/v1/responses`, { model: 'mock-model', input: 'hi', max_output_tokens: 2 })
    ).json() as { id: string };
    for (const bad of ['abc', '1.5', '', '-2']) {
      const res = await fetch(
        `${gateway.url}/v1/responses/${created.id}?stream=true&starting_after=${encodeURIComponent(bad)}`,
      );
      expect(res.status, bad).toBe(400);
      const body = (await res.json()) as ErrorBody;
      expect(body.error).toMatchObject({ param: 'starting_after', type: 'invalid_request_error' });
    }
    const ok = await fetch(`${gateway.url}/v1/responses/${created.id}?stream=true&starting_after=0`);
    expect(ok.status).toBe(200);
    const events = sseData(await ok.text()).map((e) => JSON.parse(e) as { sequence_number: number });
    expect(events.length).toBeGreaterThan(0);
    expect(events[0]!.sequence_number).toBe(1);
  });

  it('JSON nested 5,000 levels deep is a 400, and the log names the cause', async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
        done();
      },
    });
    const workers = await fx.mocks(1);
    const gateway = new Gateway(
      parseConfig({
        server: { port: 0 },
        storage: { kind: 'none' },
        workers: workers.map((w) => ({ url: w.url })),
      }),
      { logger: pino({ level: 'info' }, sink), defaultMetrics: false },
    );
    await gateway.start();
    try {
      const deep = `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`;
      const bodies: [string, string][] = [
        [
          '/v1/chat/completions',
          `{"model":"mock-model","messages":[{"role":"user","content":"hi"}],"x":${deep}}`,
        ],
        ['/v1/completions', `{"model":"mock-model","prompt":"hi","x":${deep}}`],
        ['/v1/responses', `{"model":"mock-model","input":"hi","store":false,"metadata":${deep}}`],
        ['/v1/chat/completions', `{"model":"mock-model","messages":${'['.repeat(5000)}${']'.repeat(5000)}}`],
      ];
      for (const [path, text] of bodies) {
        const res = await post(`${gateway.url}${path}`, text);
        expect(res.status, path).toBe(400);
        const body = res.json() as ErrorBody;
        expect(body.error.code, path).toBe('invalid_json');
        expect(body.error.type).toBe('invalid_request_error');
      }
      await eventually(() => lines.some((l) => l.code === 'invalid_json' && typeof l.cause === 'string'));
      const line = lines.find((l) => l.code === 'invalid_json')!;
      expect(String(line.cause)).toMatch(/nest/i);
    } finally {
      await gateway.close();
    }
  });

  it('a malformed percent-encoded URL gets an OpenAI-shaped 400', async () => {
    const { gateway } = await setup();
    for (const path of ['/v1/responses/%E0%A4%A', '/v1/responses/%zz/input_items']) {
      const res = await fetch(`${gateway.url}${path}`);
      expect(res.status, path).toBe(400);
      const body = (await res.json()) as ErrorBody;
      expect(Object.keys(body)).toEqual(['error']);
      expect(body.error).toMatchObject({ type: 'invalid_request_error', param: null, code: 'invalid_url' });
      expect(typeof body.error.message).toBe('string');
    }
  });

  it('input: [] on /v1/responses is a 400 naming input', async () => {
    const { gateway, workers } = await setup();
    const res = await post(`${gateway.url}/v1/responses`, { model: 'mock-model', input: [] });
    expect(res.status).toBe(400);
    expect((res.json() as ErrorBody).error).toMatchObject({
      param: 'input',
      type: 'invalid_request_error',
    });
    expect(workers[0]!.stats.requests).toBe(0);
  });

  it('a client that leaves a Responses request is logged and counted as 499 client_gone, like chat', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 50 });
    const gateway = await fx.gateway({ workers: workers.map((w) => ({ url: w.url })) });
    for (const stream of [true, false]) {
      const controller = new AbortController();
      const pending = fetch(`${gateway.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mock-model', input: 'hi', max_output_tokens: 500, stream }),
        signal: controller.signal,
      });
      if (stream) {
        const reader = (await pending).body!.getReader();
        await reader.read();
        await reader.read();
      } else {
        await eventually(() => workers[0]!.stats.inflight === 1);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      controller.abort();
      await pending.catch(() => undefined);
      await eventually(() => workers[0]!.stats.inflight === 0);
    }
    // A background response watched over SSE: the client leaves, the response goes on without it.
    const controller = new AbortController();
    const watched = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-model',
        input: 'hi',
        max_output_tokens: 10,
        stream: true,
        background: true,
      }),
      signal: controller.signal,
    });
    const reader = watched.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    const id = /"id":"(resp_[^"]+)"/.exec(first)![1]!;
    controller.abort();
    await eventually(async () => {
      const stored = (await (await fetch(`${gateway.url}/v1/responses/${id}`)).json()) as { status: string };
      return stored.status === 'incomplete';
    }, 5_000);

    await eventually(
      async () =>
        (await metric(gateway.url, 'sluice_requests_total', { route: 'responses', status: '499' })) === 3,
    );
    expect(
      await metricOrZero(gateway.url, 'sluice_requests_total', { route: 'responses', status: '200' }),
    ).toBe(0);
    expect(
      await metric(gateway.url, 'sluice_client_disconnects_total', { api: 'responses', model: 'mock-model' }),
    ).toBe(3);
    const snapshot = (await (await fetch(`${gateway.url}/dashboard/data`)).json()) as {
      recent: { route: string; status: number; outcome: string }[];
    };
    const recent = snapshot.recent.filter((r) => r.route === 'responses');
    expect(recent).toHaveLength(3);
    for (const r of recent) expect(r).toMatchObject({ status: 499, outcome: 'client_gone' });
  });
  it('a client that stalls inside its request (slowloris) is answered 408 and cut off; a stream longer than that bound is not', async () => {
    const requestTimeoutMs = 500;
    const { workers, gateway } = await setup({ server: { requestTimeoutMs } });
    const head =
      'POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n' +
      'Content-Length: 200\r\n\r\n{"model":"mock-model",';
    // Part of a body, part of the headers: both held for the bound at most (checked every 125 ms).
    for (const partial of [head, 'POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nX-Slow: ']) {
      const { answer, heldMs } = await stallAfter(gateway.url, partial);
      expect(answer).toMatch(/^HTTP\/1\.1 408 /);
      // Cut by this bound (checked every quarter of it), not by another one (the default is 60 s):
      // within a few multiples of it, however loaded the machine.
      expect(heldMs).toBeGreaterThanOrEqual(requestTimeoutMs * 0.9);
      expect(heldMs).toBeLessThan(requestTimeoutMs * 8);
    }
    expect(workers[0]!.stats.requests).toBe(0);
    // The bound is on receiving the request, not on the answer: a 1.2 s stream ends whole.
    const slow = await fx.mocks(1, { tokensPerSecond: 20 });
    const streaming = await fx.gateway({
      workers: slow.map((w) => ({ url: w.url })),
      server: { requestTimeoutMs: 500 },
    });
    const client = new OpenAI({ baseURL: `${streaming.url}/v1`, apiKey: 'none' });
    const stream = await client.chat.completions.create({
      model: 'mock-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 24,
      stream: true,
    });
    let tokens = 0;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) tokens++;
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(tokens).toBe(24);
    expect(finish).toBe('length');
  });
});

describe('usage chunks after a mid-stream resume, with API keys', () => {
  const fx = perTest();

  it('a client that did not ask for usage never sees a usage chunk, resumed or not', async () => {
    const workers = await fx.mocks(2, { tokensPerSecond: 0 });
    workers[0]!.setFault('reset_after:3');
    const gateway = await fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'round_robin' },
    });
    const created = await post(`${gateway.url}/admin/keys`, { name: 'usage' });
    expect(created.status).toBe(201);
    const { key, id } = created.json() as { key: string; id: string };
    const auth = { authorization: `Bearer ${key}`, 'x-sluice-resume': 'on' };
    const chunksOf = (text: string) =>
      sseData(text)
        .filter((e) => e !== '[DONE]')
        .map((e) => JSON.parse(e) as { choices: unknown[]; usage?: unknown });
    // Round robin: streams that start on w0 break there and are resumed on w1.
    for (const [i, api] of [
      ['chat', '/v1/chat/completions'],
      ['plain', '/v1/chat/completions'],
      ['completions', '/v1/completions'],
      ['plain', '/v1/completions'],
    ].entries()) {
      const body =
        api[1] === '/v1/chat/completions'
          ? chatBody({ stream: true, max_tokens: 8 })
          : { model: 'mock-model', prompt: 'once', stream: true, max_tokens: 8 };
      const res = await post(`${gateway.url}${api[1]}`, body, { ...auth, 'x-request-id': `u-${i}` });
      expect(res.status).toBe(200);
      const chunks = chunksOf(res.text);
      expect(sseData(res.text).at(-1), api[1]).toBe('[DONE]');
      expect(
        chunks.filter((c) => c.usage != null),
        `${api[0]} ${api[1]}`,
      ).toHaveLength(0);
    }
    // Resume really happened: every stream w0 started (and broke) was resumed on w1.
    expect(workers[0]!.stats.requests).toBeGreaterThan(0);
    expect(await metric(gateway.url, 'sluice_stream_resumes_total', { outcome: 'resumed' })).toBe(
      workers[0]!.stats.requests,
    );
    // A client that asks for usage gets one usage chunk, summed over the attempts.
    const resumesBefore = await metric(gateway.url, 'sluice_stream_resumes_total', { outcome: 'resumed' });
    const asked = await post(
      `${gateway.url}/v1/chat/completions`,
      chatBody({ stream: true, max_tokens: 8, stream_options: { include_usage: true } }),
      { ...auth, 'x-request-id': 'u-asked' },
    );
    const usageChunks = chunksOf(asked.text).filter((c) => c.usage != null);
    expect(usageChunks).toHaveLength(1);
    expect(usageChunks[0]!.usage).toMatchObject({ completion_tokens: 8 });
    // It was resumed: it started on w0, which broke after 3 tokens, and went on on w1.
    expect(workers[0]!.stats.requestIds).toContain('u-asked');
    expect(workers[1]!.stats.requestIds).toContain('u-asked-resume1');
    expect(await metric(gateway.url, 'sluice_stream_resumes_total', { outcome: 'resumed' })).toBe(
      resumesBefore + 1,
    );
    // The key was charged for every request all the same.
    const usage = (await (await fetch(`${gateway.url}/admin/keys/${id}/usage`)).json()) as {
      requests: number;
      completion_tokens: number;
    };
    expect(usage.requests).toBe(5);
    expect(usage.completion_tokens).toBe(40);
  });
});
