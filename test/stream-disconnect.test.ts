import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, metric, startGateway, startMocks } from './helpers/gateway.js';

describe('client disconnects and slow clients', () => {
  let workers: MockWorker[];
  let gateway: Gateway;

  beforeAll(async () => {
    workers = await startMocks(1, { tokensPerSecond: 50 });
    gateway = await startGateway({ workers: workers.map((w) => ({ url: w.url })) });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  it('a client that goes away mid-stream aborts the upstream request at once', async () => {
    const controller = new AbortController();
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 500 })),
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    await reader.read();
    await reader.read();
    expect(workers[0]!.stats.inflight).toBe(1);
    const abortedBefore = workers[0]!.stats.aborted;
    controller.abort();
    await eventually(
      () => workers[0]!.stats.aborted === abortedBefore + 1 && workers[0]!.stats.inflight === 0,
      1000,
    );
    await eventually(
      async () =>
        (await metric(gateway.url, 'sluice_client_disconnects_total', {
          api: 'chat_completions',
          model: 'mock-model',
        })) === 1,
    );
    // Its slot is free again: the worker shows nothing in flight through the gateway either.
    const admin = (await (await fetch(`${gateway.url}/admin/workers`)).json()) as {
      data: { inflight: number }[];
    };
    expect(admin.data[0]!.inflight).toBe(0);
    expect(await metric(gateway.url, 'sluice_stream_failures_total')).toBe(0);
  });

  it('a client that disconnects while waiting for the first token aborts upstream too', async () => {
    const controller = new AbortController();
    const pending = fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-mock-fault': 'delay_first:2000' },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 5 })),
      signal: controller.signal,
    }).catch(() => undefined);
    await eventually(() => workers[0]!.stats.inflight === 1);
    const abortedBefore = workers[0]!.stats.aborted;
    controller.abort();
    await pending;
    await eventually(
      () => workers[0]!.stats.aborted === abortedBefore + 1 && workers[0]!.stats.inflight === 0,
      1000,
    );
    // The gateway freed its own slot and forgot the request id: the request did not hang.
    await eventually(async () => {
      const admin = (await (await fetch(`${gateway.url}/admin/workers`)).json()) as {
        data: { inflight: number }[];
      };
      return admin.data[0]!.inflight === 0 && gateway.context.requests.size === 0;
    }, 1000);
  });

  it('a client that does not read holds the engine back instead of buffering without bound', async () => {
    const fast = (await startMocks(1, { tokensPerSecond: 0 }))[0]!;
    const gw = await startGateway({ workers: [{ url: fast.url }] });
    try {
      // ~2 MB of output; a paused client must stop the engine long before all of it is produced.
      const body = JSON.stringify(chatBody({ stream: true, max_tokens: 20_000 }));
      const req = httpRequest(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
      });
      const res = await new Promise<import('node:http').IncomingMessage>((resolve) => {
        req.on('response', resolve);
        req.end(body);
      });
      res.pause();
      await new Promise((resolve) => setTimeout(resolve, 500));
      // The engine is blocked in mid-generation: not finished, still in flight.
      expect(fast.stats.completed).toBe(0);
      expect(fast.stats.inflight).toBe(1);
      let bytes = 0;
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
      });
      res.resume();
      await new Promise((resolve) => res.on('end', resolve));
      expect(bytes).toBeGreaterThan(1_000_000);
      await eventually(() => fast.stats.completed === 1);
    } finally {
      await gw.close();
      await fast.close();
    }
  });
});
