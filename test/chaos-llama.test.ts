import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import { eventually, metric, metricOrZero, post, sseData, startGateway } from './helpers/gateway.js';
import { LlamaProcess } from './helpers/llama-process.js';

/**
 * Chaos against the real engine: `sluice worker` processes running llama.cpp on the tiny
 * model, killed with SIGKILL, frozen with SIGSTOP, restarted while requests flow.
 */
describe('chaos against a real llama.cpp worker', { timeout: 120_000 }, () => {
  let model: string;
  const workers: LlamaProcess[] = [];
  const gateways: Gateway[] = [];

  const worker = async () => {
    const w = new LlamaProcess(model);
    workers.push(w);
    await w.start();
    return w;
  };
  const gateway = async (input: Parameters<typeof startGateway>[0]) => {
    const g = await startGateway(input);
    gateways.push(g);
    return g;
  };

  beforeAll(async () => {
    // Streams here must outlast a kill, a SIGSTOP or a disconnect: answers that never end.
    model = await LlamaProcess.tinyModel({ endless: true });
  });
  afterAll(async () => {
    await Promise.all(gateways.map((g) => g.close()));
    for (const w of workers) {
      w.signal('SIGCONT');
      await w.kill();
    }
  });

  it('kill -9 mid-stream: response.failed with the partial text, stored as it was shown', async () => {
    const w = await worker();
    const gw = await gateway({ workers: [{ url: w.url }] });
    const response = await fetch(`${gw.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'tiny',
        input: 'tell me a long story',
        stream: true,
        max_output_tokens: 1500,
      }),
    });
    expect(response.status).toBe(200);
    const reader = response.body!.getReader();
    let text = '';
    while (!text.includes('response.output_text.delta'))
      text += new TextDecoder().decode((await reader.read()).value);
    await w.kill();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const blocks = text.split('\n\n').filter((b) => b.trim());
    const last = blocks.at(-1)!;
    expect(last).toMatch(/^event: response\.failed\n/);
    const data = last.slice(last.indexOf('data: ') + 6);
    const failed = JSON.parse(data) as { response: OpenAI.Responses.Response };
    expect(failed.response.status).toBe('failed');
    expect(failed.response.error?.code).toBe('request_stream_closed');
    const message = failed.response.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect(message.status).toBe('incomplete');
    const partial = (message.content[0] as OpenAI.Responses.ResponseOutputText).text;
    expect(partial.length).toBeGreaterThan(0);
    const stored = await (await fetch(`${gw.url}/v1/responses/${failed.response.id}`)).text();
    expect(stored).toBe(data.slice(data.indexOf('"response":') + 11, -1));
    expect(
      await metric(gw.url, 'sluice_stream_failures_total', { api: 'responses', reason: 'upstream_closed' }),
    ).toBe(1);
  });

  it('SIGSTOP: the idle timeout fires, the client gets the terminal error, the engine is freed', async () => {
    const w = await worker();
    const gw = await gateway({ workers: [{ url: w.url }], timeouts: { idleMs: 600 } });
    const response = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'tiny',
        stream: true,
        max_tokens: 1500,
        messages: [{ role: 'user', content: 'go' }],
      }),
    });
    const reader = response.body!.getReader();
    let text = new TextDecoder().decode((await reader.read()).value);
    w.signal('SIGSTOP');
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const last = JSON.parse(sseData(text).at(-1)!) as { error: { code: string } };
    expect(last.error.code).toBe('stream_idle_timeout');
    expect(await metric(gw.url, 'sluice_stream_failures_total', { reason: 'idle_timeout' })).toBe(1);
    w.signal('SIGCONT');
    // The gateway aborted the request: once the engine runs again it sees the closed connection.
    await eventually(async () => {
      const stats = await w.stats();
      return stats.aborted === 1 && stats.inflight === 0;
    }, 10_000);
  });

  it('a worker restarted while requests flow: none is lost, new ones route around it, it rejoins', async () => {
    const a = await worker();
    const b = await worker();
    const gw = await gateway({
      workers: [
        { url: a.url, id: 'a' },
        { url: b.url, id: 'b' },
      ],
      routing: { policy: 'round_robin' },
      health: { intervalMs: 200, failureThreshold: 1 },
      breaker: { failureThreshold: 1000 },
    });
    const outcomes: { worker: string | null; ok: boolean; code?: string; at: number }[] = [];
    let killedAt = Number.POSITIVE_INFINITY;
    let restartedAt = Number.POSITIVE_INFINITY;
    // Requests flow until a few seconds after the restart.
    const flowing = () => Date.now() < restartedAt + 3_000;
    const loop = async () => {
      while (flowing()) {
        const res = await post(`${gw.url}/v1/chat/completions`, {
          model: 'tiny',
          stream: true,
          max_tokens: 60,
          messages: [{ role: 'user', content: 'hi' }],
        });
        const at = Date.now();
        if (res.status !== 200) {
          const error = (res.json() as { error: { code: string } }).error;
          outcomes.push({ worker: null, ok: false, code: error.code, at });
          continue;
        }
        const events = sseData(res.text);
        const last = events.at(-1)!;
        if (last === '[DONE]') {
          const finished = events.some(
            (e) => e.includes('"finish_reason":"length"') || e.includes('"finish_reason":"stop"'),
          );
          expect(finished).toBe(true);
          outcomes.push({ worker: res.headers.get('x-sluice-worker'), ok: true, at });
        } else {
          const error = (JSON.parse(last) as { error: { code: string } }).error;
          outcomes.push({ worker: res.headers.get('x-sluice-worker'), ok: false, code: error.code, at });
        }
      }
    };
    const chaos = (async () => {
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      await a.kill();
      killedAt = Date.now();
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      await a.start();
      restartedAt = Date.now();
    })();
    await Promise.all([loop(), loop(), loop(), chaos]);
    // Every request ended, either completed or with a typed error code.
    expect(outcomes.length).toBeGreaterThan(20);
    for (const outcome of outcomes) if (!outcome.ok) expect(outcome.code).toMatch(/^[a-z_]+$/);
    const failures = outcomes.filter((o) => !o.ok);
    expect(
      failures.every((f) => f.code === 'request_stream_closed' || f.code === 'upstream_connect_error'),
    ).toBe(true);
    // Around the kill, requests went to b; after the restart and a health check, a serves again.
    const whileDown = outcomes.filter((o) => o.at > killedAt + 500 && o.at < restartedAt);
    expect(whileDown.length).toBeGreaterThan(0);
    expect(whileDown.every((o) => o.ok && o.worker === 'b')).toBe(true);
    expect(outcomes.some((o) => o.ok && o.worker === 'a' && o.at > restartedAt)).toBe(true);
  });

  it('kill -9 mid-stream with resume on: the stream continues on the other worker and completes', async () => {
    const a = await worker();
    const b = await worker();
    const gw = await gateway({
      workers: [
        { url: a.url, id: 'a' },
        { url: b.url, id: 'b' },
      ],
      routing: { policy: 'round_robin' },
      resume: { enabled: true },
    });
    const response = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'tiny',
        stream: true,
        max_tokens: 1500,
        stream_options: { include_usage: true },
        messages: [{ role: 'user', content: 'go on' }],
      }),
    });
    const first = response.headers.get('x-sluice-worker');
    const reader = response.body!.getReader();
    let text = '';
    while ((text.match(/"content":"/g) ?? []).length < 5)
      text += new TextDecoder().decode((await reader.read()).value);
    await (first === 'a' ? a : b).kill();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const events = sseData(text);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events
      .slice(0, -1)
      .map((e) => JSON.parse(e) as { id: string; error?: unknown; usage?: { completion_tokens: number } });
    expect(chunks.some((c) => c.error)).toBe(false);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(events.some((e) => e.includes('"finish_reason":"length"'))).toBe(true);
    expect(chunks.at(-1)!.usage!.completion_tokens).toBeGreaterThan(1000);
    expect(await metric(gw.url, 'sluice_stream_resumes_total', { outcome: 'resumed' })).toBe(1);
  });

  it('many concurrent streams with random disconnects leak nothing: in-flight returns to zero', async () => {
    const w = await worker();
    const gw = await gateway({ workers: [{ url: w.url }] });
    type Outcome = { i: number; cut: boolean; end: 'completed' | 'aborted'; events: string[] };
    const runs = Array.from({ length: 24 }, async (_, i): Promise<Outcome> => {
      const controller = new AbortController();
      const cut = i % 2 === 0 ? setTimeout(() => controller.abort(), 50 + ((i * 37) % 400)) : undefined;
      try {
        const res = await fetch(`${gw.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'tiny',
            stream: true,
            max_tokens: 200,
            messages: [{ role: 'user', content: `n${i}` }],
          }),
          signal: controller.signal,
        });
        expect(res.status, `stream ${i}`).toBe(200);
        const events = sseData(await res.text());
        return { i, cut: cut !== undefined, end: 'completed', events };
      } catch (err) {
        // Only the client's own cut may end a stream early, and only as the client's abort:
        // not a reset, not a gateway error surfacing as a fetch failure.
        expect(cut, `stream ${i} failed without being cut: ${String(err)}`).toBeDefined();
        expect((err as Error).name, `stream ${i}`).toBe('AbortError');
        return { i, cut: true, end: 'aborted', events: [] };
      } finally {
        clearTimeout(cut);
      }
    });
    const outcomes = await Promise.all(runs);
    // Every stream that was not cut (and every cut one that finished before its cut) completed:
    // [DONE] last, one finish, no error frame.
    for (const o of outcomes.filter((x) => x.end === 'completed')) {
      expect(o.events.at(-1), `stream ${o.i}`).toBe('[DONE]');
      expect(
        o.events.filter((e) => e.includes('"error"')),
        `stream ${o.i}`,
      ).toEqual([]);
      expect(
        o.events.filter((e) => /"finish_reason":"(length|stop)"/.test(e)),
        `stream ${o.i}`,
      ).toHaveLength(1);
    }
    expect(outcomes.filter((o) => !o.cut).every((o) => o.end === 'completed')).toBe(true);
    const aborted = outcomes.filter((o) => o.end === 'aborted').length;
    expect(aborted).toBeGreaterThan(0);
    await eventually(async () => {
      const stats = await w.stats();
      return stats.inflight === 0 && stats.queued === 0;
    }, 10_000);
    const stats = await w.stats();
    expect(stats.aborted).toBeGreaterThan(0);
    expect(stats.requests).toBe(24);
    // The gateway freed every slot too (its own count of the worker's requests).
    await eventually(async () => {
      const admin = (await (await fetch(`${gw.url}/admin/workers`)).json()) as {
        data: { inflight: number; queued: number }[];
      };
      return admin.data[0]!.inflight === 0 && admin.data[0]!.queued === 0;
    }, 5_000);
    // The gateway saw the cuts as client disconnects, never as stream failures.
    const disconnects = await metric(gw.url, 'sluice_client_disconnects_total');
    expect(disconnects).toBeGreaterThan(0);
    expect(disconnects).toBeLessThanOrEqual(aborted);
    expect(await metricOrZero(gw.url, 'sluice_stream_failures_total')).toBe(0);
  });
});
