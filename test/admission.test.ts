import { afterEach, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, metric, post, startGateway, startMocks } from './helpers/gateway.js';

describe('per-worker concurrency limit with a bounded queue', () => {
  let workers: MockWorker[] = [];
  let gateway: Gateway | undefined;
  afterEach(async () => {
    await gateway?.close();
    await Promise.all(workers.map((w) => w.close()));
    gateway = undefined;
  });

  const slow = (gw: Gateway, signal?: AbortSignal) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-mock-fault': 'delay_headers:600' },
      body: JSON.stringify(chatBody({ max_tokens: 1 })),
      signal,
    }).then(async (r) => ({ status: r.status, headers: r.headers, text: await r.text() }));

  it('queues beyond maxConcurrent, and a full queue is a 503 with Retry-After', async () => {
    workers = await startMocks(1);
    gateway = await startGateway({ workers: [{ url: workers[0]!.url, maxConcurrent: 1, queueSize: 1 }] });
    const gw = gateway;
    const first = slow(gw);
    await eventually(() => workers[0]!.stats.inflight === 1);
    const second = slow(gw); // waits in the queue
    await new Promise((resolve) => setTimeout(resolve, 50));
    const third = await post(`${gw.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    expect(third.status).toBe(503);
    expect(third.headers.get('retry-after')).toBeTruthy();
    expect((third.json() as { error: { code: string } }).error.code).toBe('queue_full');
    expect(workers[0]!.stats.inflight).toBe(1);
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    expect(await metric(gw.url, 'sluice_admission_rejections_total', { code: 'queue_full' })).toBe(1);
  });

  it('a request waiting longer than queueTimeoutMs gets a 503', async () => {
    workers = await startMocks(1);
    gateway = await startGateway({
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
    workers = await startMocks(2);
    gateway = await startGateway({
      routing: { policy: 'round_robin' },
      workers: workers.map((w) => ({ url: w.url, maxConcurrent: 1, queueSize: 8 })),
    });
    const held = slow(gateway);
    await eventually(() => workers.some((w) => w.stats.inflight === 1));
    const busy = workers.findIndex((w) => w.stats.inflight === 1);
    for (let i = 0; i < 3; i++) {
      const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
      expect(res.headers.get('x-sluice-worker')).toBe(new URL(workers[1 - busy]!.url).host);
    }
    await held;
  });
});
