import { createServer, request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, metric, metricOrZero, startGateway, startMocks } from './helpers/gateway.js';

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
    expect(await metricOrZero(gateway.url, 'sluice_stream_failures_total')).toBe(0);
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

  const FRONTS = [
    {
      api: 'chat completions',
      path: '/v1/chat/completions',
      body: { model: 'flood-model', stream: true, messages: [{ role: 'user', content: 'x' }] },
      ending: 'data: [DONE]\n\n',
    },
    {
      api: 'Messages',
      path: '/v1/messages',
      body: { model: 'flood-model', stream: true, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] },
      ending: '"type":"message_stop"}\n\n',
    },
    {
      api: 'Responses',
      path: '/v1/responses',
      body: { model: 'flood-model', stream: true, store: false, input: 'x' },
      ending: 'event: response.completed\n',
    },
  ];
  for (const front of FRONTS) {
    it(`${front.api}: a client that does not read holds the engine back instead of buffering without bound`, async () => {
      // 96 MiB of output, far more than every socket buffer on the way can absorb (loopback TCP
      // buffers autotune up to tens of MiB): a gateway that buffered instead of pausing the engine
      // would let the engine write all of it and hold it in its own memory.
      const total = 96 * 1024 * 1024;
      const engine = await startFloodEngine(total);
      const gw = await startGateway({
        workers: [{ url: engine.url, models: [FLOOD_MODEL] }],
        storage: { kind: 'none' },
        // What a Responses run holds is bounded (64 MiB by default, the copies its closing makes of
        // its content counted ahead, and all runs together by limits.maxHeldBytes): this one is let
        // hold its 96 MiB and the copies its end makes of them.
        limits: { maxBodyBytes: 1024 * 1024 * 1024, maxHeldBytes: 1024 * 1024 * 1024 },
      });
      // The gateway runs in this process: a 'drain' listener per refused write would be a warning.
      const warnings: Error[] = [];
      const onWarning = (warning: Error) => warnings.push(warning);
      process.on('warning', onWarning);
      try {
        const req = httpRequest(`${gw.url}${front.path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
        });
        const res = await new Promise<IncomingMessage>((resolve) => {
          req.on('response', resolve);
          req.end(JSON.stringify(front.body));
        });
        expect(res.statusCode).toBe(200);
        res.pause();
        const memoryBefore = process.memoryUsage();
        // Event-driven: the engine is held back once its socket stops draining, and stays so.
        await eventually(() => engine.done || engine.blockedForMs() >= 500, 30_000);
        const held = engine.written;
        const memoryHeld = process.memoryUsage();
        // Held back at a bound far below the total: socket buffers and stream high-water marks only.
        expect(held).toBeLessThan(total / 3);
        // It did not take what the engine wrote into its memory.
        expect(memoryHeld.arrayBuffers - memoryBefore.arrayBuffers).toBeLessThan(32 * 1024 * 1024);
        expect(memoryHeld.rss - memoryBefore.rss).toBeLessThan(64 * 1024 * 1024);
        expect(engine.done).toBe(false);

        let read = 0;
        let tail = '';
        let ended = false;
        res.on('data', (chunk: Buffer) => {
          read += chunk.length;
          const window = tail + chunk.toString('latin1');
          if (window.includes(front.ending)) ended = true;
          tail = window.slice(-256);
        });
        res.resume();
        await new Promise((resolve) => res.on('end', resolve));
        // Everything arrives once the client reads: the engine was held back, never cut.
        expect(engine.done).toBe(true);
        expect(engine.written).toBeGreaterThanOrEqual(total);
        // Chat is relayed byte for byte; the other fronts are translated.
        if (front.path === '/v1/chat/completions') expect(read).toBe(engine.written);
        else expect(read).toBeGreaterThan(total / 2);
        // Its terminal event (Responses': the whole response, 96 MiB of text in it).
        expect(ended).toBe(true);
        await new Promise((resolve) => setImmediate(resolve));
        expect(warnings.map((w) => w.name)).not.toContain('MaxListenersExceededWarning');
      } finally {
        process.off('warning', onWarning);
        await gw.close();
        await engine.close();
      }
    });
  }
});

const FLOOD_MODEL = 'flood-model';

/**
 * An engine that streams `total` bytes of chat chunks as fast as its socket takes them, honouring
 * backpressure ('drain'), and counts what it managed to write and how long it has been blocked.
 */
async function startFloodEngine(total: number): Promise<{
  url: string;
  readonly written: number;
  readonly done: boolean;
  blockedForMs(): number;
  close(): Promise<void>;
}> {
  let written = 0;
  let done = false;
  let blockedSince: number | undefined;
  const content = 'x'.repeat(4000);
  const server = createServer((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: FLOOD_MODEL, object: 'model' }] }));
      return;
    }
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const event = (delta: Record<string, unknown>, finish: string | null) =>
        `data: ${JSON.stringify({
          id: 'chatcmpl-flood',
          object: 'chat.completion.chunk',
          created: 1,
          model: FLOOD_MODEL,
          choices: [{ index: 0, delta, finish_reason: finish }],
        })}\n\n`;
      const write = (text: string) => {
        written += Buffer.byteLength(text);
        return res.write(text);
      };
      write(event({ role: 'assistant' }, null));
      const pump = () => {
        blockedSince = undefined;
        while (written < total) {
          if (!write(event({ content }, null))) {
            blockedSince = performance.now();
            res.once('drain', pump);
            return;
          }
        }
        write(event({}, 'stop'));
        const last = 'data: [DONE]\n\n';
        written += last.length;
        res.end(last, () => {
          done = true;
        });
      };
      pump();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get written() {
      return written;
    },
    get done() {
      return done;
    },
    blockedForMs: () => (blockedSince === undefined ? 0 : performance.now() - blockedSince),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
