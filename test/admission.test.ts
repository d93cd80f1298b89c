import { describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import { chatBody, eventually, metric, perTest, post } from './helpers/gateway.js';

describe('per-worker concurrency limit with a bounded queue', () => {
  const fx = perTest();

  const slow = (gw: Gateway, signal?: AbortSignal) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-mock-fault': 'delay_headers:600' },
      body: JSON.stringify(chatBody({ max_tokens: 1 })),
      signal,
    }).then(async (r) => ({ status: r.status, headers: r.headers, text: await r.text() }));

  it('queues beyond maxConcurrent, and a full queue is a 503 with Retry-After', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url, maxConcurrent: 1, queueSize: 1 }] });
    const first = slow(gateway);
    await eventually(() => workers[0]!.stats.inflight === 1);
    const second = slow(gateway); // waits in the queue
    // Event-driven: the gateway shows it queued before the third arrives.
    await eventually(async () => {
      const admin = (await (await fetch(`${gateway.url}/admin/workers`)).json()) as {
        data: { queued: number }[];
      };
      return admin.data[0]!.queued === 1;
    });
    const third = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    expect(third.status).toBe(503);
    expect(third.headers.get('retry-after')).toBeTruthy();
    expect((third.json() as { error: { code: string } }).error.code).toBe('queue_full');
    expect(workers[0]!.stats.inflight).toBe(1);
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    expect(await metric(gateway.url, 'sluice_admission_rejections_total', { code: 'queue_full' })).toBe(1);
  });

  it('a request waiting longer than queueTimeoutMs gets a 503', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({
      workers: [{ url: workers[0]!.url, maxConcurrent: 1, queueSize: 4, queueTimeoutMs: 100 }],
    });
    const first = slow(gateway);
    await eventually(() => workers[0]!.stats.inflight === 1);
    const waited = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    expect(waited.status).toBe(503);
    expect((waited.json() as { error: { code: string } }).error.code).toBe('queue_timeout');
    expect(waited.headers.get('retry-after')).toBeTruthy();
    expect((await first).status).toBe(200);
  });

  it('a saturated worker is skipped while another has a free slot', async () => {
    const workers = await fx.mocks(2);
    const gateway = await fx.gateway({
      routing: { policy: 'round_robin' },
      workers: workers.map((w) => ({ url: w.url, maxConcurrent: 1, queueSize: 8 })),
    });
    const held = slow(gateway);
    await eventually(() => workers.some((w) => w.stats.inflight === 1));
    const busy = workers.findIndex((w) => w.stats.inflight === 1);
    for (let i = 0; i < 3; i++) {
      const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
      expect(res.headers.get('x-sluice-worker')).toBe(`worker-${2 - busy}`);
    }
    await held;
  });
});
