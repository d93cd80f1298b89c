import OpenAI, { APIError } from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import type { SluiceConfigInput } from '../src/config/schema.js';
import { EVIL_MODEL, type EvilEngine, startEvilEngine } from './helpers/evil-engine.js';
import { eventually, metric, perTest, post, sseData } from './helpers/gateway.js';

/**
 * Engines that lie, never end, flood or answer the wrong status (test/helpers/evil-engine.ts),
 * through a gateway on loopback: what the client sees, what is stored, what is counted, and that
 * the gateway let go of the engine.
 */
const fixture = perTest();
const engines: EvilEngine[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
});

async function setup(
  modes: string[],
  extra: SluiceConfigInput = {},
): Promise<{ url: string; engines: EvilEngine[]; client: OpenAI }> {
  const started = await Promise.all(modes.map((mode) => startEvilEngine(mode)));
  engines.push(...started);
  const gateway = await fixture.gateway({
    workers: started.map((e, i) => ({ url: e.url, id: `evil-${i}`, models: [EVIL_MODEL] })),
    routing: { policy: 'round_robin' },
    breaker: { failureThreshold: 1000 },
    server: { forwardHeaders: ['x-evil'] },
    ...extra,
  });
  return {
    url: gateway.url,
    engines: started,
    client: new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 }),
  };
}

const chat = (extra: Record<string, unknown> = {}) => ({
  model: EVIL_MODEL,
  messages: [{ role: 'user', content: 'hi' }],
  ...extra,
});

const failures = (url: string, api: string, reason: string) =>
  metric(url, 'sluice_stream_failures_total', { api, model: EVIL_MODEL, reason });

describe('an engine that reports its own failure as a finish', () => {
  const cases = [
    { finish: '"abort"', code: 'engine_aborted' },
    { finish: '"error"', code: 'engine_error' },
    { finish: '3', code: 'invalid_finish_reason' },
    { finish: '{"type":"weird"}', code: 'invalid_finish_reason' },
    { finish: '"exploded"', code: 'invalid_finish_reason' },
  ];
  for (const c of cases) {
    it(`chat: finish_reason ${c.finish} ends with the ${c.code} error frame, never a finish`, async () => {
      const { url } = await setup([`finish:${c.finish}`]);
      const res = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
      expect(res.status).toBe(200);
      const data = sseData(res.text);
      expect(data).not.toContain('[DONE]');
      const last = JSON.parse(data.at(-1)!) as { error: { code: string; type: string } };
      expect(last.error.code).toBe(c.code);
      // The tokens before it were shown; the lying finish never was.
      expect(res.text).toContain('t2 ');
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as { choices: { finish_reason: unknown }[] });
      expect(chunks).toHaveLength(4);
      for (const part of chunks) expect(part.choices[0]!.finish_reason).toBeNull();
      expect(await failures(url, 'chat_completions', 'engine_abort')).toBe(1);
    });
  }

  it('the openai SDK stream throws the typed error after the tokens', async () => {
    const { client } = await setup(['finish:"abort"']);
    const stream = await client.chat.completions.create(chat({ stream: true }) as never);
    let text = '';
    let error: unknown;
    try {
      for await (const part of stream as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>) {
        text += part.choices[0]?.delta.content ?? '';
        expect(part.choices[0]?.finish_reason ?? null).toBeNull();
      }
    } catch (err) {
      error = err;
    }
    expect(text).toBe('t0 t1 t2 ');
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).code).toBe('engine_aborted');
  });

  it('responses: finish_reason "abort" is response.failed with the partial message incomplete, stored as shown', async () => {
    const { url } = await setup(['finish:"abort"']);
    const res = await post(`${url}/v1/responses`, { model: EVIL_MODEL, input: 'hi', stream: true });
    expect(res.status).toBe(200);
    const events = sseData(res.text).map((d) => JSON.parse(d) as Record<string, unknown>);
    const terminal = events.at(-1)! as { type: string; response: Record<string, unknown> };
    expect(terminal.type).toBe('response.failed');
    expect(events.some((e) => e.type === 'response.completed')).toBe(false);
    const response = terminal.response as {
      id: string;
      status: string;
      error: { code: string };
      output: { status: string; content: { text: string }[] }[];
    };
    expect(response.status).toBe('failed');
    expect(response.error.code).toBe('engine_aborted');
    expect(response.output[0]!.status).toBe('incomplete');
    expect(response.output[0]!.content[0]!.text).toBe('t0 t1 t2 ');
    // Stored == shown, byte for byte: the JSON text of the terminal event's response.
    const shown = /"response":(\{.*\})(,"sequence_number":\d+)?\}$/.exec(sseData(res.text).at(-1)!)![1];
    const stored = await (await fetch(`${url}/v1/responses/${response.id}`)).text();
    expect(stored).toBe(shown);
    expect(await failures(url, 'responses', 'engine_abort')).toBe(1);
  });

  it('responses: a non-streaming answer with finish_reason "error" is failed too', async () => {
    const { url } = await setup(['finish:"error"']);
    const res = await post(`${url}/v1/responses`, { model: EVIL_MODEL, input: 'hi' });
    const body = res.json() as { status: string; error: { code: string } };
    expect(body.status).toBe('failed');
    expect(body.error.code).toBe('engine_error');
  });

  it('non-streaming chat: an aborted answer is retried with fresh ids, then a 502 engine_aborted', async () => {
    const {
      url,
      engines: [engine],
    } = await setup(['finish:"abort"'], { retry: { maxAttempts: 3 } });
    const res = await post(`${url}/v1/chat/completions`, chat(), { 'x-request-id': 'lying-1' });
    expect(res.status).toBe(502);
    expect((res.json() as { error: { code: string } }).error.code).toBe('engine_aborted');
    expect(engine!.stats.requestIds).toEqual(['lying-1', 'lying-1-retry1', 'lying-1-retry2']);
  });

  it('an aborted finish before any token fails over to a healthy worker', async () => {
    const { url, engines: started } = await setup(['finish_now:"abort"', 'ok']);
    const res = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-worker')).toBe('evil-1');
    expect(sseData(res.text).at(-1)).toBe('[DONE]');
    expect(started[0]!.stats.requests).toBe(1);
  });
});

describe('keep-alives are not progress', () => {
  for (const kind of ['comment', 'empty_choices', 'role', 'usage']) {
    it(`after output, ${kind} keep-alives alone end the stream at the idle timeout and free the engine`, async () => {
      const {
        url,
        engines: [engine],
      } = await setup([`keepalive:${kind}:2`], {
        // A deadline well inside the test's time, so that a gateway moved by keep-alives fails
        // the assertions below (ended by the deadline) rather than the test's timeout.
        timeouts: { idleMs: 400, deadlineMs: 8_000 },
      });
      const idleMs = 400;
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(chat({ stream: true })),
      });
      // When the last token reached the client, and when the stream ended.
      let text = '';
      let lastTokenAt = 0;
      for await (const part of res.body!) {
        text += Buffer.from(part).toString('utf8');
        if (!text.includes('"error"')) lastTokenAt = performance.now();
      }
      const endedAt = performance.now();
      const last = JSON.parse(sseData(text).at(-1)!) as { error: { code: string } };
      expect(last.error.code).toBe('stream_idle_timeout');
      expect(text).toContain('t1 ');
      // Ended by the idle clock from the last token on (keep-alives every 20 ms did not move it),
      // not by the deadline (20 idle periods here): within a few idle periods of that token.
      expect(endedAt - lastTokenAt).toBeLessThan(idleMs * 10);
      await eventually(() => engine!.stats.aborted === 1 && engine!.stats.open === 0);
      expect(await failures(url, 'chat_completions', 'idle_timeout')).toBe(1);
    });
  }

  it('before any output, keep-alives alone fail over to another worker at the idle timeout', async () => {
    const { url, engines: started } = await setup(['keepalive:comment:0', 'ok'], {
      timeouts: { idleMs: 400 },
    });
    const res = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-worker')).toBe('evil-1');
    expect(sseData(res.text).at(-1)).toBe('[DONE]');
    await eventually(() => started[0]!.stats.aborted === 1);
  });

  it('before any output on the only worker: an HTTP 504 stream_idle_timeout, not a 30-minute wait', async () => {
    const {
      url,
      engines: [engine],
    } = await setup(['keepalive:role:0'], {
      timeouts: { idleMs: 300 },
      retry: { maxAttempts: 2 },
    });
    const res = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
    expect(res.status).toBe(504);
    expect((res.json() as { error: { code: string } }).error.code).toBe('stream_idle_timeout');
    // A route that did not answer in time is not tried again for the request (issue 31: another
    // worker or the next model would be; this is the only one): one attempt, let go.
    await eventually(() => engine!.stats.aborted === 1 && engine!.stats.open === 0);
    expect(engine!.stats.requests).toBe(1);
  });
});

describe('an engine that holds its answer open after [DONE]', () => {
  it('the client has its whole stream at once; the engine is let go within the drain bound (5 s)', async () => {
    const {
      url,
      engines: [engine],
    } = await setup(['linger']);
    const started = Date.now();
    const res = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
    expect(sseData(res.text).at(-1)).toBe('[DONE]');
    expect(res.text).toContain('t4 ');
    // The client had its whole stream while the engine still held its answer open (event order,
    // not a time bound): the gateway reads on (so that a well-behaved connection goes back to its pool) ...
    expect(engine!.stats.open).toBe(1);
    // ... and cuts it past the bound, one reaper for every stream draining.
    await eventually(() => engine!.stats.aborted === 1 && engine!.stats.open === 0, 9_000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(4_900);
    expect(
      await metric(url, 'sluice_stream_failures_total', { api: 'chat_completions' }, { absent: 0 }),
    ).toBe(0);
    // The worker still serves.
    engine!.mode = 'ok';
    const again = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
    expect(sseData(again.text).at(-1)).toBe('[DONE]');
  }, 20_000);
});

describe('bounded buffers', () => {
  it('an endless line ends the stream with upstream_event_too_large and aborts the engine', async () => {
    const {
      url,
      engines: [engine],
    } = await setup(['endless_line:2'], {
      limits: { maxEventBytes: 256 * 1024 },
    });
    const res = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
    const last = JSON.parse(sseData(res.text).at(-1)!) as { error: { code: string } };
    expect(last.error.code).toBe('upstream_event_too_large');
    expect(res.text).not.toContain('aaaa');
    await eventually(() => engine!.stats.aborted === 1);
    expect(await failures(url, 'chat_completions', 'limit_exceeded')).toBe(1);
    // The gateway stopped reading at the bound: the engine (which honours backpressure and counts
    // what its socket took) got little past it, the kernel's buffers at most.
    expect(engine!.stats.bytes[0]).toBeGreaterThan(256 * 1024);
    expect(engine!.stats.bytes[0]).toBeLessThan(4 * 256 * 1024);
  });

  it('other streams go on while one engine sends an endless line', async () => {
    const { url } = await setup(['ok'], { limits: { maxEventBytes: 4 * 1024 * 1024 } });
    const endless = post(`${url}/v1/chat/completions`, chat({ stream: true }), {
      'x-evil': 'endless_line:2',
    });
    const healthy = await Promise.all(
      Array.from({ length: 5 }, () => post(`${url}/v1/chat/completions`, chat({ stream: true }))),
    );
    for (const res of healthy) expect(sseData(res.text).at(-1)).toBe('[DONE]');
    const cut = await endless;
    expect(JSON.parse(sseData(cut.text).at(-1)!).error.code).toBe('upstream_event_too_large');
  });

  it('role-only chunks before the first token are bounded: upstream_preamble_too_large, retried, then 502', async () => {
    const {
      url,
      engines: [engine],
    } = await setup(['fat_role'], {
      limits: { maxPrefaceBytes: 512 * 1024 },
      retry: { maxAttempts: 2 },
    });
    const res = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
    expect(res.status).toBe(502);
    expect((res.json() as { error: { code: string } }).error.code).toBe('upstream_preamble_too_large');
    await eventually(() => engine!.stats.aborted === 2 && engine!.stats.open === 0);
    for (const bytes of engine!.stats.bytes) {
      expect(bytes).toBeGreaterThan(512 * 1024);
      expect(bytes).toBeLessThan(4 * 512 * 1024);
    }
  });

  it('a non-streaming body past its bound is a 502 upstream_body_too_large, not retried', async () => {
    const {
      url,
      engines: [engine],
    } = await setup(['huge_body:64'], {
      limits: { maxBodyBytes: 1024 * 1024 },
    });
    const res = await post(`${url}/v1/chat/completions`, chat());
    expect(res.status).toBe(502);
    expect((res.json() as { error: { code: string } }).error.code).toBe('upstream_body_too_large');
    expect(engine!.stats.requests).toBe(1);
    await eventually(() => engine!.stats.aborted === 1);
    // Read up to the bound, then cut: not the 64 MiB the engine had to send.
    expect(engine!.stats.bytes[0]).toBeGreaterThan(1024 * 1024);
    expect(engine!.stats.bytes[0]).toBeLessThan(4 * 1024 * 1024);
  });
});

describe('an engine that trickles its non-streaming answer', () => {
  it('a valid JSON body at 1 byte a tick is cut at idleMs after its headers (504 stream_idle_timeout), not at the deadline; the engine let go', async () => {
    const idleMs = 300;
    const deadlineMs = 8_000;
    const {
      url,
      client,
      engines: [engine],
    } = await setup(['trickle:20'], { timeouts: { idleMs, deadlineMs }, retry: { maxAttempts: 2 } });
    const res = await post(`${url}/v1/chat/completions`, chat());
    expect(res.status).toBe(504);
    const error = (res.json() as { error: { code: string; message: string } }).error;
    expect(error.code).toBe('stream_idle_timeout');
    expect(error.message).toContain(`not whole ${idleMs} ms after its headers`);
    // The engine's connection was cut: it is not left writing the rest for minutes.
    await eventually(() => engine!.stats.aborted === 1 && engine!.stats.open === 0);
    // It had sent some of the body (progress of bytes, which is not progress), far from all.
    expect(engine!.stats.bytes[0]).toBeGreaterThan(0);
    expect(engine!.stats.bytes[0]).toBeLessThan(4096);
    // A route that did not answer in time is not tried again for the request.
    expect(engine!.stats.requests).toBe(1);
    // The openai SDK sees the same 504; an engine answering at once is answered.
    const thrown = await client.chat.completions.create(chat() as never).catch((err: unknown) => err);
    expect((thrown as APIError).status).toBe(504);
    expect((thrown as APIError).code).toBe('stream_idle_timeout');
    engine!.mode = 'ok';
    expect((await post(`${url}/v1/chat/completions`, chat())).status).toBe(200);
  });

  it('an embeddings answer trickled is cut the same way', async () => {
    const {
      url,
      engines: [engine],
    } = await setup(['trickle:20'], { timeouts: { idleMs: 300, deadlineMs: 8_000 } });
    const res = await post(`${url}/v1/embeddings`, { model: EVIL_MODEL, input: 'x' });
    expect(res.status).toBe(504);
    expect((res.json() as { error: { code: string } }).error.code).toBe('stream_idle_timeout');
    await eventually(() => engine!.stats.aborted === 1 && engine!.stats.open === 0);
  });
});

describe('only a 200 from an engine is an answer', () => {
  for (const status of [201, 202, 204, 206, 301, 302]) {
    it(`an engine's ${status} is a 502 upstream_unexpected_status that the openai SDK throws`, async () => {
      const {
        client,
        engines: [engine],
      } = await setup([`status:${status}`], { retry: { maxAttempts: 1 } });
      const error = await client.chat.completions.create(chat() as never).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(APIError);
      expect((error as APIError).status).toBe(502);
      expect((error as APIError).code).toBe('upstream_unexpected_status');
      expect(engine!.stats.requests).toBe(1);
    });
  }

  for (const status of [401, 403]) {
    it(`an engine's ${status} is the gateway's configuration: 502 upstream_auth_failed, never ${status}`, async () => {
      const { url } = await setup([`status:${status}`], { retry: { maxAttempts: 1 } });
      const res = await post(`${url}/v1/chat/completions`, chat({ stream: true }));
      expect(res.status).toBe(502);
      const error = (res.json() as { error: { code: string; message: string } }).error;
      expect(error.code).toBe('upstream_auth_failed');
      expect(error.message).toContain('apiKey');
    });
  }

  it("an engine's Retry-After on 429 and 503 reaches the client", async () => {
    const { url } = await setup(['status:429:7'], { retry: { maxAttempts: 1 } });
    const limited = await post(`${url}/v1/chat/completions`, chat());
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('7');
    engines[0]!.mode = 'status:503:12';
    const unavailable = await post(`${url}/v1/chat/completions`, chat());
    expect(unavailable.status).toBe(503);
    expect(unavailable.headers.get('retry-after')).toBe('12');
    engines[0]!.mode = 'status:503';
    const bare = await post(`${url}/v1/chat/completions`, chat());
    expect(bare.headers.get('retry-after')).toBe('1');
  });

  it('a 201 is failed over to a worker that answers 200', async () => {
    const { url } = await setup(['status:201', 'ok']);
    const res = await post(`${url}/v1/chat/completions`, chat());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-worker')).toBe('evil-1');
  });
});

describe('resume treats an engine abort as the engine failing', () => {
  it('an aborted finish mid-stream is resumed on another worker when resume is on', async () => {
    const evil = await startEvilEngine('finish:"abort"');
    engines.push(evil);
    const [mock] = await fixture.mocks(1, { models: [EVIL_MODEL] });
    const gateway = await fixture.gateway({
      workers: [
        { url: evil.url, id: 'evil-0', models: [EVIL_MODEL] },
        { url: mock!.url, id: 'mock-0', models: [EVIL_MODEL] },
      ],
      routing: { policy: 'round_robin' },
    });
    const res = await post(`${gateway.url}/v1/chat/completions`, chat({ stream: true, max_tokens: 12 }), {
      'x-sluice-resume': 'on',
    });
    const data = sseData(res.text);
    expect(data.at(-1)).toBe('[DONE]');
    expect(res.text).toContain('t2 ');
    expect(res.text).not.toContain('"error"');
    const resumed = mock!.stats.lastBodies.at(-1) as { messages: { role: string; content: string }[] };
    expect(resumed.messages.at(-1)).toEqual({ role: 'assistant', content: 't0 t1 t2 ' });
    expect(
      await metric(gateway.url, 'sluice_stream_resumes_total', { model: EVIL_MODEL, outcome: 'resumed' }),
    ).toBe(1);
  });
});
