import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import { createMockWorker, type MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, post, startGateway } from './helpers/gateway.js';

describe('data-parallel ranks', () => {
  let worker: MockWorker;
  let gateway: Gateway;

  beforeAll(async () => {
    worker = await createMockWorker({ dpSize: 4, tokensPerSecond: 100 });
    gateway = await startGateway({ workers: [{ url: worker.url, dpSize: 4 }] });
  });
  afterAll(async () => {
    await gateway.close();
    await worker.close();
  });

  it('passes a targeted rank to the engine as vLLM expects (X-data-parallel-rank)', async () => {
    const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), {
      'x-data-parallel-rank': '2',
    });
    expect(res.status).toBe(200);
    expect(worker.stats.ranks.at(-1)).toBe(2);
  });

  it('an out-of-range rank is a 400 naming the connected ranks, before anything is sent', async () => {
    const before = worker.stats.requests;
    const res = await post(`${gateway.url}/v1/chat/completions`, chatBody(), { 'x-data-parallel-rank': '7' });
    expect(res.status).toBe(400);
    const error = (res.json() as { error: { code: string; message: string; connected_ranks: number[] } })
      .error;
    expect(error.code).toBe('invalid_data_parallel_rank');
    expect(error.connected_ranks).toEqual([0, 1, 2, 3]);
    expect(error.message).toContain('[0, 1, 2, 3]');
    expect(worker.stats.requests).toBe(before);
  });

  it('without a target, balances across ranks by in-flight count', async () => {
    const start = worker.stats.ranks.length;
    const controllers = Array.from({ length: 4 }, () => new AbortController());
    const streams = await Promise.all(
      controllers.map((c) =>
        fetch(`${gateway.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(chatBody({ stream: true, max_tokens: 200 })),
          signal: c.signal,
        }),
      ),
    );
    expect(streams.every((s) => s.status === 200)).toBe(true);
    expect([...worker.stats.ranks.slice(start)].sort()).toEqual([0, 1, 2, 3]);
    for (const c of controllers) c.abort();
    await eventually(() => worker.stats.inflight === 0);
  });
});
