import { connect } from 'node:net';
import { Client } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, sseData, startGateway, startMocks } from './helpers/gateway.js';

/** Whether a new TCP connection to `url` is refused. */
function refusesConnections(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNREFUSED') resolve(true);
      else reject(err);
    });
  });
}

describe('graceful shutdown', () => {
  let worker: MockWorker | undefined;
  let gateway: Gateway | undefined;
  let kept: Client | undefined;
  afterEach(async () => {
    await kept?.close().catch(() => undefined);
    await gateway?.close();
    await worker?.close();
  });

  async function setup() {
    [worker] = await startMocks(1, { tokensPerSecond: 50 });
    gateway = await startGateway({ workers: [{ url: worker!.url }] });
    // A connection kept alive from before the shutdown (one request already made on it).
    kept = new Client(gateway.url, { pipelining: 0, keepAliveTimeout: 60_000 });
    const ready = await kept.request({ path: '/health/ready', method: 'GET' });
    expect(ready.statusCode).toBe(200);
    await ready.body.text();
    return { worker: worker!, gateway, kept };
  }

  it('lets short streams finish, ends long ones with dispatcher_closed, and refuses new requests', async () => {
    const { worker, gateway, kept } = await setup();
    const url = `${gateway.url}/v1/chat/completions`;
    const open = (maxTokens: number) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(chatBody({ stream: true, max_tokens: maxTokens })),
      });
    const long = await open(1000); // ~20 s at 50 tokens/s
    const short = await open(5); // ~100 ms
    const shortText = short.text();
    const longText = long.text();
    await eventually(() => worker.stats.inflight === 2);
    // A generous grace: the short stream finishes well within it on a loaded machine, the long one cannot.
    // The worker's in-flight count when the gateway closes its engine clients (which would end
    // any engine request anyway): the long stream's engine request must be aborted before that.
    let inflightAtPoolClose: number | undefined;
    const registry = gateway.context.registry;
    const closeAll = registry.closeAll.bind(registry);
    registry.closeAll = async () => {
      inflightAtPoolClose = worker.stats.inflight;
      await closeAll();
    };
    const shutdown = gateway.shutdown(3_000);

    // A new connection is refused outright.
    expect(await refusesConnections(url)).toBe(true);
    // The connection kept alive from before was idle: Node closes it with the listener.
    await expect(kept.request({ path: '/health', method: 'GET' })).rejects.toThrow();
    // A request that still reaches the gateway (pipelined on a busy connection, or injected as
    // here) finds it draining: readiness is a 503, a generation request a 503 closing its connection.
    const ready = await gateway.app.inject({ method: 'GET', url: '/health/ready' });
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toMatchObject({ status: 'not_ready', draining: true });
    const late = await gateway.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify(chatBody({ max_tokens: 2 })),
    });
    expect(late.statusCode).toBe(503);
    expect(late.headers.connection).toBe('close');
    expect((late.json() as { error: { code: string } }).error.code).toBe('gateway_shutting_down');
    expect(worker.stats.requests).toBe(2); // the refused request never reached the engine

    expect(sseData(await shortText).at(-1)).toBe('[DONE]');
    const events = sseData(await longText);
    const last = JSON.parse(events.at(-1)!) as { error: { code: string; type: string } };
    expect(last.error.code).toBe('dispatcher_closed');
    expect(last.error.type).toBe('server_error');
    expect(events).not.toContain('[DONE]');
    await shutdown;
    // Read while the worker still runs: the gateway aborted the long stream's engine request.
    expect(inflightAtPoolClose).toBe(0);
    expect(worker.stats.inflight).toBe(0);
    expect(worker.stats.completed).toBe(1);
    expect(worker.stats.aborted).toBe(1);
  });

  it('a Responses stream in flight at shutdown ends with response.failed dispatcher_closed, stored as shown', async () => {
    const { worker, gateway } = await setup();
    const response = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-model', input: 'x', stream: true, max_output_tokens: 1000 }),
    });
    const text = response.text();
    await eventually(() => worker.stats.inflight === 1);
    const store = gateway.context.store!;
    // The final write (the response, with any conversation append, in one transaction).
    const stored = new Promise<string>((resolve) => {
      const finish = store.finishResponse.bind(store);
      store.finishResponse = async (ending) => {
        const written = await finish(ending);
        resolve((ending.insert ?? ending.update)!.json);
        return written;
      };
    });
    await gateway.shutdown(100);
    const blocks = (await text).split('\n\n').filter((b) => b.trim());
    const last = blocks.at(-1)!;
    expect(/^event: (.*)$/m.exec(last)?.[1]).toBe('response.failed');
    const data = /^data: (.*)$/m.exec(last)![1]!;
    const event = JSON.parse(data) as { response: { status: string; error: { code: string } } };
    expect(event.response.status).toBe('failed');
    expect(event.response.error.code).toBe('dispatcher_closed');
    // What was stored before the store closed is the response the client was shown.
    expect(await stored).toBe(data.slice(data.indexOf('"response":') + 11, -1));
    await eventually(() => worker.stats.inflight === 0);
    expect(worker.stats.aborted).toBe(1);
  });
});
