import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { eventually, metricOrZero, startGateway, startMocks } from './helpers/gateway.js';

/**
 * What the one pipeline does the same for every front (issue 30's drifts): a client that leaves
 * mid-stream is counted once, as a 499 and a disconnect of its API, and its engine request freed,
 * on chat, completions, Anthropic Messages, Responses over HTTP and over WebSocket; and a stream
 * that breaks on a malformed event ends typed on the WebSocket as it does over HTTP.
 */

const MODEL = 'mock-model';

/** Opens a stream, reads until some of it arrived, then leaves (the socket destroyed). */
function leaveMidStream(base: string, path: string, body: unknown): Promise<void> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method: 'POST',
        path,
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        let seen = 0;
        res.on('data', (chunk: Buffer) => {
          seen += chunk.length;
          if (seen > 200) {
            req.destroy();
            resolve();
          }
        });
        res.on('error', () => resolve());
      },
    );
    req.on('error', (err) => (req.destroyed ? resolve() : reject(err)));
    req.end(JSON.stringify(body));
  });
}

describe('every front, one pipeline', () => {
  let worker: MockWorker;
  let gateway: Gateway;

  beforeAll(async () => {
    // Slow enough that every stream is still running when its client leaves.
    [worker] = (await startMocks(1, { tokensPerSecond: 40 })) as [MockWorker];
    gateway = await startGateway({ workers: [{ url: worker.url }] });
  });
  afterAll(async () => {
    await gateway.close();
    await worker.close();
  });

  const disconnects = (api: string) =>
    metricOrZero(gateway.url, 'sluice_client_disconnects_total', { api, model: MODEL });
  const gone = (route: string) =>
    metricOrZero(gateway.url, 'sluice_requests_total', { route, model: MODEL, status: '499' });

  const fronts = [
    {
      api: 'chat_completions',
      path: '/v1/chat/completions',
      body: { model: MODEL, stream: true, max_tokens: 400, messages: [{ role: 'user', content: 'hi' }] },
    },
    {
      api: 'completions',
      path: '/v1/completions',
      body: { model: MODEL, stream: true, max_tokens: 400, prompt: 'hi' },
    },
    {
      api: 'messages',
      path: '/v1/messages',
      body: { model: MODEL, stream: true, max_tokens: 400, messages: [{ role: 'user', content: 'hi' }] },
    },
    {
      api: 'responses',
      path: '/v1/responses',
      body: { model: MODEL, stream: true, max_output_tokens: 400, input: 'hi' },
    },
  ];

  for (const front of fronts) {
    it(`${front.api}: a client that leaves mid-stream is one 499 and one disconnect, and its engine request is freed`, async () => {
      const [disconnectsBefore, goneBefore, abortedBefore] = [
        await disconnects(front.api),
        await gone(front.api),
        worker.stats.aborted,
      ];
      await leaveMidStream(gateway.url, front.path, front.body);
      await eventually(async () => (await gone(front.api)) === goneBefore + 1, 5_000);
      await eventually(() => worker.stats.aborted === abortedBefore + 1, 5_000);
      expect(await disconnects(front.api)).toBe(disconnectsBefore + 1);
      expect(worker.stats.inflight).toBe(0);
    });
  }

  it('responses over WebSocket: a client that leaves mid-stream is one 499 and one disconnect, and its engine request is freed', async () => {
    const [disconnectsBefore, goneBefore, abortedBefore] = [
      await disconnects('responses'),
      await gone('responses'),
      worker.stats.aborted,
    ];
    const ws = new WebSocket(`${gateway.url.replace('http', 'ws')}/v1/responses`);
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    let deltas = 0;
    ws.on('message', (data) => {
      if (String(data).includes('response.output_text.delta') && ++deltas === 3) ws.terminate();
    });
    ws.send(JSON.stringify({ type: 'response.create', model: MODEL, input: 'hi', max_output_tokens: 400 }));
    await eventually(async () => (await gone('responses')) === goneBefore + 1, 5_000);
    await eventually(() => worker.stats.aborted === abortedBefore + 1, 5_000);
    expect(await disconnects('responses')).toBe(disconnectsBefore + 1);
    expect(worker.stats.inflight).toBe(0);
  });

  it('a stream that breaks on a malformed event ends typed on the WebSocket, as over HTTP, and is counted once', async () => {
    const labels = { api: 'responses', model: MODEL, reason: 'read_error' };
    const before = await metricOrZero(gateway.url, 'sluice_stream_failures_total', labels);
    // The engine breaks the connection's first response only (a header would break each of them).
    worker.setFault('malformed_after:2,once');
    const ws = new WebSocket(`${gateway.url.replace('http', 'ws')}/v1/responses`);
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    const messages: { type: string; response?: { status: string; error: { code: string } | null } }[] = [];
    ws.on('message', (data) => messages.push(JSON.parse(String(data))));
    const terminals = () => messages.filter((m) => /^response\.(completed|incomplete|failed)$/.test(m.type));
    ws.send(JSON.stringify({ type: 'response.create', model: MODEL, input: 'hi', max_output_tokens: 20 }));
    await eventually(() => terminals().length === 1, 5_000);
    const terminal = messages.at(-1)!;
    expect(terminal.type).toBe('response.failed');
    expect(terminal.response).toMatchObject({ status: 'failed', error: { code: 'malformed_chunk' } });
    expect(await metricOrZero(gateway.url, 'sluice_stream_failures_total', labels)).toBe(before + 1);
    // The connection is still good for the next response.
    ws.send(JSON.stringify({ type: 'response.create', model: MODEL, input: 'again', max_output_tokens: 3 }));
    await eventually(() => terminals().length === 2, 5_000);
    expect(terminals()[1]).toMatchObject({ response: { status: 'incomplete', error: null } });
    expect(ws.readyState).toBe(WebSocket.OPEN);
    expect(await metricOrZero(gateway.url, 'sluice_stream_failures_total', labels)).toBe(before + 1);
    ws.close();
  });
});
