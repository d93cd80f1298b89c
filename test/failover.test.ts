import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { MockWorker } from '../src/mock/mock-worker.js';
import {
  chatBody,
  eventually,
  metric,
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
      breaker: { failureThreshold: 2, cooldownMs: 300 },
      health: { intervalMs: 60_000 },
      workers: workers.map((w) => ({ url: w.url })),
    });
    const bad = new URL(workers[0]!.url).host;
    try {
      for (let i = 0; i < 6; i++) {
        expect((await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }))).status).toBe(
          200,
        );
      }
      // Two failures opened the circuit: the bad worker got no more than two requests.
      expect(workers[0]!.stats.requests).toBe(2);
      expect(await metric(gateway.url, 'sluice_worker_circuit_state', { worker: bad })).toBe(2);
      workers[0]!.setFault(undefined);
      await new Promise((resolve) => setTimeout(resolve, 350));
      for (let i = 0; i < 4; i++) {
        expect((await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }))).status).toBe(
          200,
        );
      }
      expect(workers[0]!.stats.requests).toBeGreaterThan(2);
      expect(await metric(gateway.url, 'sluice_worker_circuit_state', { worker: bad })).toBe(0);
      expect(
        await metric(gateway.url, 'sluice_circuit_transitions_total', { worker: bad, state: 'open' }),
      ).toBe(1);
    } finally {
      await gateway.close();
      await Promise.all(workers.map((w) => w.close()));
    }
  });
});
