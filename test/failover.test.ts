import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { MockWorker } from '../src/mock/mock-worker.js';
import {
  chatBody,
  eventually,
  metric,
  metricOrZero,
  perTest,
  post,
  sseData,
  startGateway,
  startMocks,
} from './helpers/gateway.js';

/**
 * Pre-first-byte failures: the gateway retries on another worker with backoff, each attempt
 * with a fresh upstream request id, and never after anything reached the client.
 */
describe('retries and failover before the first byte', () => {
  const fx = perTest();
  let workers: MockWorker[] = [];

  async function setup(faults: (string | undefined)[], config: Parameters<typeof startGateway>[0] = {}) {
    workers = await fx.mocks(faults.length);
    for (const [i, fault] of faults.entries()) workers[i]!.setFault(fault);
    return fx.gateway({
      routing: { policy: 'round_robin' },
      ...config,
      workers: workers.map((w) => ({ url: w.url })),
    });
  }

  const cases: [string, boolean[]][] = [
    ['http_500', [true, false]],
    ['http_503', [true, false]],
    ['http_429', [true, false]],
    ['drop_after:0', [false]],
    ['reset_after:0', [true]],
    ['error_frame_after:0', [true]],
    ['error_frame_str_after:0', [true]],
    ['eof_after:0', [true]],
    ['malformed_after:0', [true]],
  ];
  for (const [fault, modes] of cases) {
    it(`fails over on ${fault} with a fresh request id (${modes.map((m) => (m ? 'stream' : 'non-stream')).join(', ')})`, async () => {
      const gw = await setup([fault, undefined]);
      for (const stream of modes) {
        for (let i = 0; i < 2; i++) {
          // Round robin starts each pair on a different worker; every request must succeed.
          const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream, max_tokens: 3 }), {
            'x-request-id': `fo-${fault}-${stream}-${i}`,
          });
          expect(res.status).toBe(200);
          if (stream) expect(sseData(res.text).at(-1)).toBe('[DONE]');
          // Clients see a worker's opaque public id (workers without an id: worker-<n>), never host:port.
          expect(res.headers.get('x-sluice-worker')).toBe('worker-2');
        }
      }
      const failedIds = workers[0]!.stats.requestIds;
      const servedIds = workers[1]!.stats.requestIds;
      expect(failedIds.length).toBeGreaterThan(0);
      for (const id of failedIds) {
        expect(servedIds).not.toContain(id);
        expect(servedIds).toContain(`${id}-retry1`);
      }
      expect(await metric(gw.url, 'sluice_upstream_retries_total')).toBe(failedIds.length);
    });
  }

  it('a non-retryable 4xx from the engine is answered at once, not retried', async () => {
    const gw = await setup([undefined]);
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), {
      'x-mock-fault': 'http_400',
    });
    expect(res.status).toBe(400);
    expect((res.json() as { error: { message: string } }).error.message).toMatch(/HTTP 400/);
    expect(workers[0]!.stats.requests).toBe(1);
  });

  it('when every attempt fails the client gets the last upstream error', async () => {
    const gw = await setup(['http_500', 'http_500'], { retry: { maxAttempts: 3 } });
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true }));
    expect(res.status).toBe(502);
    const body = res.json() as { error: { code: string; type: string } };
    expect(body.error.code).toBe('upstream_http_error');
    expect(body.error.type).toBe('server_error');
    const ids = workers.flatMap((w) => w.stats.requestIds);
    expect(ids).toHaveLength(3);
    expect(new Set(ids).size).toBe(3);
  });

  it('429 from every worker is a 429 with Retry-After', async () => {
    const gw = await setup(['http_429'], { retry: { maxAttempts: 2 } });
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBeTruthy();
  });

  it('a killed worker: new requests fail over to the other, and it turns unhealthy', async () => {
    const gw = await setup([undefined, undefined]);
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    await workers[0]!.close();
    for (let i = 0; i < 4; i++) {
      const stream = await client.chat.completions.create({
        model: 'mock-model',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        max_tokens: 2,
      });
      let finish: string | null | undefined;
      for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
      expect(finish).toBe('length');
    }
    const snapshot = (await (await fetch(`${gw.url}/admin/workers`)).json()) as {
      data: { id: string; healthy: boolean }[];
    };
    expect(snapshot.data.find((w) => w.id === new URL(workers[0]!.url).host)?.healthy).toBe(false);
    expect((await fetch(`${gw.url}/health/ready`)).status).toBe(200);
  });

  it('no healthy worker left: 503 with Retry-After', async () => {
    const gw = await setup([undefined]);
    await workers[0]!.close();
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(502);
    const again = await post(`${gw.url}/v1/chat/completions`, chatBody());
    expect(again.status).toBe(503);
    expect(again.headers.get('retry-after')).toBe('1');
    expect((again.json() as { error: { code: string } }).error.code).toBe('no_worker_available');
    expect((await fetch(`${gw.url}/health/ready`)).status).toBe(503);
  });

  it('a stall before the first event is retried elsewhere after the idle timeout', async () => {
    const gw = await setup(['stall_after:0', undefined], { timeouts: { idleMs: 200 } });
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 2 }), {
      'x-request-id': 'stall-first',
    });
    expect(res.status).toBe(200);
    expect(workers[1]!.stats.requestIds).toContain('stall-first-retry1');
    await eventually(() => workers[0]!.stats.aborted === 1 && workers[0]!.stats.inflight === 0);
  });

  it('slow response headers time out and fail over', async () => {
    const gw = await setup(['delay_headers:1000', undefined], { timeouts: { headersMs: 150 } });
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 2 }));
    expect(res.status).toBe(200);
    // Clients see a worker's opaque public id (workers without an id: worker-<n>), never host:port.
    expect(res.headers.get('x-sluice-worker')).toBe('worker-2');
  });
});

describe('circuit breaker', () => {
  it('opens after consecutive failures, then a half-open probe closes it', async () => {
    const workers = await startMocks(2);
    workers[0]!.setFault('http_500');
    const gateway = await startGateway({
      routing: { policy: 'round_robin' },
      breaker: { failureThreshold: 2, cooldownMs: 10_000 },
      health: { intervalMs: 60_000 },
      workers: workers.map((w) => ({ url: w.url })),
    });
    const bad = new URL(workers[0]!.url).host;
    // The bad worker's breakers read an injected clock: the cooldown passes when the test says so.
    // An engine 5xx counts against the worker's circuit for the model (see test/breaker.test.ts).
    let now = 1_000_000;
    const worker = gateway.context.registry.get(bad)!;
    for (const breaker of [worker.breaker, worker.modelBreaker('mock-model')]) {
      (breaker as unknown as { now: () => number }).now = () => now;
    }
    const chat = () => post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    const state = () => metric(gateway.url, 'sluice_worker_circuit_state', { worker: bad });
    const transitions = (to: string) =>
      metricOrZero(gateway.url, 'sluice_circuit_transitions_total', { worker: bad, state: to });
    try {
      for (let i = 0; i < 6; i++) expect((await chat()).status).toBe(200);
      // Two failures opened the circuit: the bad worker got no more than two requests.
      expect(workers[0]!.stats.requests).toBe(2);
      expect(await state()).toBe(2);
      expect(await transitions('open')).toBe(1);
      // Still open just before the cooldown ends: nothing reaches the bad worker.
      now += 9_999;
      for (let i = 0; i < 3; i++) expect((await chat()).status).toBe(200);
      expect(workers[0]!.stats.requests).toBe(2);

      // The cooldown is over: exactly one request goes through as the probe. It is held in the
      // worker (slow headers) while more requests arrive; none of them reaches the bad worker.
      now += 1;
      workers[0]!.setFault('delay_headers:1500');
      // Round robin may send the first requests after the cooldown to the good worker: send one
      // at a time until the probe is out (at most a few: the rotation reaches the bad worker).
      const sent: { done: boolean; response: ReturnType<typeof chat> }[] = [];
      while (workers[0]!.stats.requests < 3) {
        if (sent.length > 4) throw new Error('no probe reached the bad worker');
        const one = { done: false, response: chat() };
        void one.response.finally(() => {
          one.done = true;
        });
        sent.push(one);
        await eventually(() => workers[0]!.stats.requests === 3 || one.done);
      }
      await eventually(() => workers[0]!.stats.inflight === 1);
      expect(await state()).toBe(1);
      expect(await transitions('half_open')).toBe(1);
      const during = await Promise.all(Array.from({ length: 4 }, () => chat()));
      for (const r of during) expect(r.status).toBe(200);
      for (const r of during) expect(r.headers.get('x-sluice-worker')).not.toBe(bad);
      expect(workers[0]!.stats.requests).toBe(3); // the single probe, nothing else
      expect(workers[0]!.stats.inflight).toBe(1);

      // The probe succeeds: the circuit closes and the worker takes its share again.
      workers[0]!.setFault(undefined);
      for (const one of sent) expect((await one.response).status).toBe(200);
      expect(await state()).toBe(0);
      expect(await transitions('closed')).toBe(1);
      for (let i = 0; i < 4; i++) expect((await chat()).status).toBe(200);
      expect(workers[0]!.stats.requests).toBe(5);
      expect(await transitions('open')).toBe(1);
    } finally {
      await gateway.close();
      await Promise.all(workers.map((w) => w.close()));
    }
  });
});

describe('retry ids and backoff', () => {
  it('each retry has its own -retryN id (N up to maxAttempts - 1); a worker not tried yet is tried without a wait', async () => {
    // One engine behind four worker entries: it fails the first three attempts with a 500 and
    // records under which request id each attempt arrived.
    const arrivals: { id: string }[] = [];
    const engine = createServer((req, res) => {
      if (req.method === 'GET') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'mock-model', object: 'model' }] }));
        return;
      }
      req.resume();
      req.on('end', () => {
        arrivals.push({ id: String(req.headers['x-request-id']) });
        if (arrivals.length < 4) {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: 'boom', type: 'server_error', code: 500 } }));
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'chatcmpl-1',
            object: 'chat.completion',
            created: 1,
            model: 'mock-model',
            choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
            usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
          }),
        );
      });
    });
    await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
    // The waits asked for, recorded (the sleep returns at once); the doubling of the backoff on a
    // route already tried is retry-backoff.test.ts's.
    const waits: number[] = [];
    const gateway = await startGateway(
      {
        routing: { policy: 'round_robin' },
        retry: { maxAttempts: 4, backoffMs: 100, maxBackoffMs: 10_000 },
        breaker: { failureThreshold: 100 },
        workers: ['a', 'b', 'c', 'd'].map((id) => ({ url, id, models: ['mock-model'] })),
      },
      { retryTiming: { random: () => 0, sleep: async (ms) => void waits.push(ms) } },
    );
    try {
      const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), {
        'x-request-id': 'backoff-1',
      });
      expect(res.status).toBe(200);
      expect(arrivals.map((a) => a.id)).toEqual([
        'backoff-1',
        'backoff-1-retry1',
        'backoff-1-retry2',
        'backoff-1-retry3',
      ]);
      // Each retry went to a worker entry not tried yet: none waited.
      expect(waits).toEqual([]);
      expect(await metric(gateway.url, 'sluice_upstream_retries_total')).toBe(3);
    } finally {
      await gateway.close();
      await new Promise((resolve) => engine.close(resolve));
    }
  });
});
