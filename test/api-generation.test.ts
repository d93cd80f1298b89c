import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, metric, post, sseData, startGateway, startMocks } from './helpers/gateway.js';

describe('chat completions and completions through the gateway (two mock workers)', () => {
  let workers: MockWorker[];
  let gateway: Gateway;
  let client: OpenAI;

  beforeAll(async () => {
    workers = await startMocks(2);
    gateway = await startGateway({
      workers: workers.map((w) => ({ url: w.url })),
      routing: { policy: 'round_robin' },
    });
    client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  it('streams a chat completion with the openai SDK, with usage passed through', async () => {
    const stream = await client.chat.completions.create({
      model: 'mock-model',
      messages: [{ role: 'user', content: 'say something' }],
      stream: true,
      max_tokens: 5,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text.trim().split(/\s+/)).toHaveLength(5);
    expect(finish).toBe('length');
    expect(usage?.completion_tokens).toBe(5);
    expect(usage?.prompt_tokens).toBeGreaterThan(0);
  });

  it('answers a non-streaming chat completion', async () => {
    const completion = await client.chat.completions.create({
      model: 'mock-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 3,
    });
    expect(completion.object).toBe('chat.completion');
    expect(completion.choices[0]?.message.content?.trim().split(/\s+/)).toHaveLength(3);
    expect(completion.usage?.completion_tokens).toBe(3);
  });

  it('serves completions, streaming and not', async () => {
    const plain = await client.completions.create({
      model: 'mock-model',
      prompt: 'once upon',
      max_tokens: 4,
    });
    expect(plain.choices[0]?.text.trim().split(/\s+/)).toHaveLength(4);
    const stream = await client.completions.create({
      model: 'mock-model',
      prompt: 'once upon',
      max_tokens: 4,
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    expect(text).toBe(plain.choices[0]?.text);
  });

  it('relays a healthy stream byte for byte', async () => {
    const body = chatBody({ stream: true, max_tokens: 6, stream_options: { include_usage: true } });
    const direct = await post(`${workers[0]!.url}/v1/chat/completions`, body);
    const viaGateway = await post(`${gateway.url}/v1/chat/completions`, body);
    expect(viaGateway.status).toBe(200);
    expect(viaGateway.headers.get('content-type')).toMatch(/^text\/event-stream/);
    // Ids and timestamps differ per request; everything else must be identical, byte for byte.
    const normalise = (text: string) =>
      text.replace(/"id":"[^"]+"/g, '"id":"X"').replace(/"created":\d+/g, '"created":0');
    expect(normalise(viaGateway.text)).toBe(normalise(direct.text));
    expect(sseData(viaGateway.text).at(-1)).toBe('[DONE]');
  });

  it('spreads requests over both workers and sends each a request id', async () => {
    const before = workers.map((w) => w.stats.requests);
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
      expect(res.status).toBe(200);
      seen.add(res.headers.get('x-sluice-worker') ?? '');
    }
    expect(seen.size).toBe(2);
    expect(workers[0]!.stats.requests - before[0]!).toBe(3);
    expect(workers[1]!.stats.requests - before[1]!).toBe(3);
    const ids = workers.flatMap((w) => w.stats.requestIds);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('keeps a sane client X-Request-Id and forwards it upstream', async () => {
    const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), {
      'x-request-id': 'client-id-123',
    });
    expect(res.headers.get('x-request-id')).toBe('client-id-123');
    expect(workers.flatMap((w) => w.stats.requestIds)).toContain('client-id-123');
  });

  it('never forwards the client Authorization header upstream', async () => {
    await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), {
      authorization: 'Bearer client-secret',
      'x-request-id': 'auth-check',
    });
    const worker = workers.find((w) => w.stats.requestIds.includes('auth-check'))!;
    expect(JSON.stringify(worker.stats.lastHeaders)).not.toContain('client-secret');
  });

  it('lists the models of healthy workers', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['mock-model']);
  });

  it('counts requests in Prometheus metrics with HELP and TYPE', async () => {
    const text = await (await fetch(`${gateway.url}/metrics`)).text();
    for (const name of [
      'sluice_requests_total',
      'sluice_request_duration_seconds',
      'sluice_time_to_first_token_seconds',
      'sluice_worker_healthy',
      'sluice_inflight_requests',
      'sluice_upstream_retries_total',
      'sluice_worker_circuit_state',
      'sluice_stream_failures_total',
      'sluice_client_disconnects_total',
    ]) {
      expect(text).toContain(`# HELP ${name} `);
      expect(text).toContain(`# TYPE ${name} `);
    }
    expect(
      await metric(gateway.url, 'sluice_requests_total', {
        route: 'chat_completions',
        model: 'mock-model',
        status: '200',
      }),
    ).toBeGreaterThan(5);
    expect(await metric(gateway.url, 'sluice_worker_healthy')).toBe(2);
  });
});
