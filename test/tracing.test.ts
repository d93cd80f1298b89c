import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import type { SluiceConfigInput } from '../src/config/schema.js';
import { chatBody, eventually, perTest, post, sseData } from './helpers/gateway.js';

/** One OTLP/JSON attribute value. */
interface OtlpValue {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values: OtlpValue[] };
}
interface OtlpAttribute {
  key: string;
  value: OtlpValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: OtlpAttribute[];
  events?: { name: string; attributes?: OtlpAttribute[] }[];
  status?: { code?: number; message?: string };
}
interface OtlpBody {
  resourceSpans: {
    resource: { attributes: OtlpAttribute[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

const KIND_SERVER = 2;
const KIND_CLIENT = 3;
const STATUS_UNSET = 0;
const STATUS_OK = 1;
const STATUS_ERROR = 2;

function plain(value: OtlpValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.arrayValue) return value.arrayValue.values.map(plain);
  return undefined;
}

function attrs(list: OtlpAttribute[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((a) => [a.key, plain(a.value)]));
}

/** A tiny OTLP/HTTP receiver: collects the JSON bodies POSTed to /v1/traces. */
class OtlpReceiver {
  readonly bodies: OtlpBody[] = [];
  readonly headers: IncomingMessage['headers'][] = [];
  private server: Server | undefined;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (chunk: Buffer) => parts.push(chunk));
      req.on('end', () => {
        if (req.method !== 'POST' || req.url !== '/v1/traces') {
          res.writeHead(404).end();
          return;
        }
        let raw = Buffer.concat(parts);
        if (req.headers['content-encoding'] === 'gzip') raw = gunzipSync(raw);
        this.bodies.push(JSON.parse(raw.toString('utf8')) as OtlpBody);
        this.headers.push(req.headers);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1/traces`;
  }

  get spans(): OtlpSpan[] {
    return this.bodies.flatMap((b) => b.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)));
  }

  /** Every span of the trace whose server span has `sluice.request_id` = `requestId`. */
  trace(requestId: string): { server: OtlpSpan; attempts: OtlpSpan[]; routing: OtlpSpan[] } | undefined {
    const server = this.spans.find(
      (s) => s.kind === KIND_SERVER && attrs(s.attributes)['sluice.request_id'] === requestId,
    );
    if (!server) return undefined;
    const children = this.spans.filter((s) => s.parentSpanId === server.spanId);
    return {
      server,
      attempts: children.filter((s) => s.kind === KIND_CLIENT),
      routing: children.filter((s) => s.name === 'routing'),
    };
  }

  /** Waits for the trace of `requestId` with at least `attempts` attempt spans. */
  async waitFor(requestId: string, attempts = 1) {
    await eventually(() => (this.trace(requestId)?.attempts.length ?? 0) >= attempts, 3_000);
    return this.trace(requestId)!;
  }

  clear(): void {
    this.bodies.length = 0;
    this.headers.length = 0;
  }

  close(): Promise<void> {
    return new Promise((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/** The trace id and parent span id of a `traceparent` header value. */
function parseTraceparent(value: unknown): { traceId: string; spanId: string; flags: string } {
  expect(typeof value).toBe('string');
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value as string);
  expect(match).not.toBeNull();
  return { traceId: match![1]!, spanId: match![2]!, flags: match![3]! };
}

describe('OpenTelemetry tracing', () => {
  const fx = perTest();
  const receiver = new OtlpReceiver();

  beforeAll(() => receiver.start());
  afterAll(() => receiver.close());
  beforeEach(() => receiver.clear());

  async function setup(count: number, input: SluiceConfigInput = {}) {
    const workers = await fx.mocks(count);
    const gw = await fx.gateway({
      routing: { policy: 'round_robin' },
      tracing: {
        enabled: true,
        endpoint: receiver.url,
        serviceName: 'sluice-test',
        batchDelayMs: 20,
        headers: { 'x-collector-key': 'k1' },
      },
      ...input,
      workers: workers.map((w) => ({ url: w.url })),
    });
    return { gw, workers };
  }

  it('a streamed chat completion: server span with GenAI attributes, attempt span, first token, OK', async () => {
    const { gw, workers } = await setup(1);
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const stream = await client.chat.completions.create(
      {
        model: 'mock-model',
        messages: [{ role: 'user', content: 'hello there' }],
        stream: true,
        max_tokens: 5,
        temperature: 0.5,
        stream_options: { include_usage: true },
      },
      { headers: { 'x-request-id': 'tr-stream-1' } },
    );
    let text = '';
    let responseId = '';
    for await (const chunk of stream) {
      responseId ||= chunk.id;
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    expect(text.length).toBeGreaterThan(0);

    const { server, attempts, routing } = await receiver.waitFor('tr-stream-1');
    const a = attrs(server.attributes);
    expect(server.name).toBe('POST /v1/chat/completions');
    expect(a['gen_ai.operation.name']).toBe('chat');
    expect(a['gen_ai.request.model']).toBe('mock-model');
    expect(a['gen_ai.request.max_tokens']).toBe(5);
    expect(a['gen_ai.request.temperature']).toBe(0.5);
    expect(a['gen_ai.request.stream']).toBe(true);
    expect(a['gen_ai.response.model']).toBe('mock-model');
    expect(a['gen_ai.response.id']).toBe(responseId);
    expect(a['gen_ai.response.finish_reasons']).toEqual(['length']);
    expect(a['gen_ai.usage.output_tokens']).toBe(5);
    expect(a['gen_ai.usage.input_tokens']).toBeGreaterThan(0);
    expect(a['http.request.method']).toBe('POST');
    expect(a['http.route']).toBe('/v1/chat/completions');
    expect(a['http.response.status_code']).toBe(200);
    expect(a['sluice.outcome']).toBe('completed');
    expect(a['sluice.attempts']).toBe(1);
    expect(server.status?.code).toBe(STATUS_OK);
    expect(server.parentSpanId ?? '').toBe('');
    const firstToken = server.events?.find((e) => e.name === 'first_token');
    expect(firstToken).toBeDefined();
    expect(attrs(firstToken!.attributes)['gen_ai.response.time_to_first_chunk']).toBeGreaterThan(0);

    expect(routing).toHaveLength(1);
    expect(attrs(routing[0]!.attributes)).toMatchObject({
      'sluice.routing.policy': 'round_robin',
      'sluice.worker.id': new URL(workers[0]!.url).host,
    });

    expect(attempts).toHaveLength(1);
    const attempt = attempts[0]!;
    const port = Number(new URL(workers[0]!.url).port);
    expect(attempt.name).toBe('chat mock-model');
    expect(attempt.traceId).toBe(server.traceId);
    expect(attrs(attempt.attributes)).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'mock-model',
      'server.address': '127.0.0.1',
      'server.port': port,
      'http.response.status_code': 200,
      'sluice.upstream.request_id': 'tr-stream-1',
      'sluice.attempt.number': 1,
    });
    expect(attempt.status?.code).toBe(STATUS_OK);
    expect(attempt.events?.some((e) => e.name === 'first_token')).toBe(true);

    // The worker's parent is the attempt span.
    const sent = parseTraceparent(workers[0]!.stats.lastHeaders.at(-1)?.traceparent);
    expect(sent).toEqual({ traceId: attempt.traceId, spanId: attempt.spanId, flags: '01' });

    const resource = attrs(receiver.bodies[0]!.resourceSpans[0]!.resource.attributes);
    expect(resource['service.name']).toBe('sluice-test');
    expect(receiver.headers[0]!['x-collector-key']).toBe('k1');
    expect(receiver.headers[0]!['content-type']).toContain('application/json');
  });

  it("continues the client's traceparent and gives the worker the gateway's own", async () => {
    const { gw, workers } = await setup(1);
    const clientTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const clientSpan = '00f067aa0ba902b7';
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 3 }), {
      'x-request-id': 'tr-parent-1',
      traceparent: `00-${clientTrace}-${clientSpan}-01`,
      tracestate: 'vendor=abc',
    });
    expect(res.status).toBe(200);
    const { server, attempts } = await receiver.waitFor('tr-parent-1');
    expect(server.traceId).toBe(clientTrace);
    expect(server.parentSpanId).toBe(clientSpan);
    const headers = workers[0]!.stats.lastHeaders.at(-1)!;
    const sent = parseTraceparent(headers.traceparent);
    expect(sent.traceId).toBe(clientTrace);
    expect(sent.spanId).toBe(attempts[0]!.spanId);
    expect(sent.spanId).not.toBe(clientSpan);
    expect(headers.tracestate).toBe('vendor=abc');
  });

  it('a failover yields two attempt spans with distinct upstream request ids', async () => {
    const { gw, workers } = await setup(2);
    workers[0]!.setFault('http_500');
    // Round robin: one of two requests starts on the failing worker.
    for (const id of ['tr-fo-1', 'tr-fo-2']) {
      const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 3 }), {
        'x-request-id': id,
      });
      expect(res.status).toBe(200);
    }
    await eventually(
      () => receiver.trace('tr-fo-1') !== undefined && receiver.trace('tr-fo-2') !== undefined,
    );
    const id = (receiver.trace('tr-fo-1')!.attempts.length === 2 ? 'tr-fo-1' : 'tr-fo-2') as string;
    const { server, attempts, routing } = await receiver.waitFor(id, 2);
    expect(attempts).toHaveLength(2);
    expect(routing).toHaveLength(2);
    const [failed, served] = [...attempts].sort(
      (x, y) =>
        Number(attrs(x.attributes)['sluice.attempt.number']) -
        Number(attrs(y.attributes)['sluice.attempt.number']),
    ) as [(typeof attempts)[0], (typeof attempts)[0]];
    const f = attrs(failed.attributes);
    const s = attrs(served.attributes);
    expect(f['sluice.upstream.request_id']).toBe(id);
    expect(s['sluice.upstream.request_id']).toBe(`${id}-retry1`);
    expect(f['sluice.worker.id']).toBe(new URL(workers[0]!.url).host);
    expect(s['sluice.worker.id']).toBe(new URL(workers[1]!.url).host);
    expect(f['http.response.status_code']).toBe(500);
    expect(f['error.type']).toBe('upstream_http_error');
    expect(failed.status?.code).toBe(STATUS_ERROR);
    expect(served.status?.code).toBe(STATUS_OK);
    expect(attrs(server.attributes)['sluice.attempts']).toBe(2);
    expect(server.status?.code).toBe(STATUS_OK);
    // Each worker saw its own attempt as its parent.
    const sentTo = (i: number) =>
      workers[i]!.stats.lastHeaders.map((h) => parseTraceparent(h.traceparent).spanId);
    expect(sentTo(0)).toContain(failed.spanId);
    expect(sentTo(1)).toContain(served.spanId);
  });

  it('an embeddings request that fails over: its server span, an attempt span per try, its input tokens', async () => {
    const { gw, workers } = await setup(2);
    workers[0]!.setFault('http_500');
    const res = await post(
      `${gw.url}/v1/embeddings`,
      { model: 'mock-model', input: ['one two', 'three'] },
      { 'x-request-id': 'tr-embed-1' },
    );
    expect(res.status).toBe(200);
    const { server, attempts } = await receiver.waitFor('tr-embed-1', 2);
    expect(server.name).toBe('POST /v1/embeddings');
    expect(attrs(server.attributes)).toMatchObject({
      'gen_ai.operation.name': 'embeddings',
      'gen_ai.request.model': 'mock-model',
      'gen_ai.usage.input_tokens': 3,
      'http.route': '/v1/embeddings',
      'http.response.status_code': 200,
      'sluice.outcome': 'completed',
      'sluice.attempts': 2,
    });
    expect(attempts.map((a) => a.name)).toEqual(['embeddings mock-model', 'embeddings mock-model']);
    expect(attempts.map((a) => attrs(a.attributes)['sluice.upstream.request_id']).sort()).toEqual([
      'tr-embed-1',
      'tr-embed-1-retry1',
    ]);
  });

  it('a stream failing mid-way sets ERROR with the stable code', async () => {
    const { gw, workers } = await setup(1);
    workers[0]!.setFault('reset_after:2');
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 6 }), {
      'x-request-id': 'tr-fail-1',
    });
    expect(res.status).toBe(200);
    const last = JSON.parse(sseData(res.text).at(-1)!) as { error: { code: string } };
    expect(last.error.code).toBe('request_stream_closed');
    const { server, attempts } = await receiver.waitFor('tr-fail-1');
    expect(server.status).toMatchObject({ code: STATUS_ERROR, message: 'request_stream_closed' });
    expect(attrs(server.attributes)).toMatchObject({
      'error.type': 'request_stream_closed',
      'sluice.outcome': 'failed',
    });
    expect(server.events?.some((e) => e.name === 'first_token')).toBe(true);
    expect(attempts[0]!.status?.code).toBe(STATUS_ERROR);
    expect(attrs(attempts[0]!.attributes)['error.type']).toBe('request_stream_closed');
  });

  it('a stream resumed on another worker gets an attempt span of its own', async () => {
    const { gw, workers } = await setup(2, { models: { 'mock-model': { resume: { enabled: true } } } });
    workers[0]!.setFault('reset_after:3');
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 8 }), {
      'x-request-id': 'tr-resume-1',
    });
    expect(sseData(res.text).at(-1)).toBe('[DONE]');
    const { server, attempts } = await receiver.waitFor('tr-resume-1', 2);
    const byId = Object.fromEntries(
      attempts.map((s) => [attrs(s.attributes)['sluice.upstream.request_id'], s] as const),
    );
    expect(Object.keys(byId).sort()).toEqual(['tr-resume-1', 'tr-resume-1-resume1']);
    expect(byId['tr-resume-1']!.status?.code).toBe(STATUS_ERROR);
    expect(byId['tr-resume-1-resume1']!.status?.code).toBe(STATUS_OK);
    expect(attrs(server.attributes)).toMatchObject({ 'sluice.resumes': 1, 'sluice.attempts': 2 });
    expect(server.status?.code).toBe(STATUS_OK);
  });

  it('non-streaming completions and the Responses API are traced too', async () => {
    const { gw } = await setup(1, { storage: { kind: 'none' } });
    const res = await post(
      `${gw.url}/v1/completions`,
      { model: 'mock-model', prompt: 'once upon', max_tokens: 4 },
      { 'x-request-id': 'tr-cmpl-1' },
    );
    expect(res.status).toBe(200);
    const body = res.json() as { id: string };
    const cmpl = await receiver.waitFor('tr-cmpl-1');
    expect(attrs(cmpl.server.attributes)).toMatchObject({
      'gen_ai.operation.name': 'text_completion',
      'gen_ai.response.id': body.id,
      'gen_ai.response.finish_reasons': ['length'],
      'gen_ai.usage.output_tokens': 4,
      'gen_ai.request.stream': false,
    });
    expect(cmpl.attempts[0]!.name).toBe('text_completion mock-model');

    const created = await post(
      `${gw.url}/v1/responses`,
      { model: 'mock-model', input: 'hi', store: false, max_output_tokens: 3 },
      { 'x-request-id': 'tr-resp-1' },
    );
    expect(created.status).toBe(200);
    const response = created.json() as { id: string; usage: { output_tokens: number } };
    const resp = await receiver.waitFor('tr-resp-1');
    expect(resp.server.name).toBe('POST /v1/responses');
    expect(attrs(resp.server.attributes)).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.max_tokens': 3,
      'gen_ai.response.id': response.id,
      'gen_ai.usage.output_tokens': response.usage.output_tokens,
    });
    expect(resp.server.status?.code).toBe(STATUS_OK);
  });

  it('a 4xx answer leaves the status unset and names the error', async () => {
    const { gw } = await setup(1);
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ model: 'nope' }), {
      'x-request-id': 'tr-404',
    });
    expect(res.status).toBe(404);
    await eventually(() => receiver.trace('tr-404') !== undefined);
    const { server, attempts } = receiver.trace('tr-404')!;
    expect(attempts).toHaveLength(0);
    expect(server.status?.code ?? STATUS_UNSET).toBe(STATUS_UNSET);
    expect(attrs(server.attributes)).toMatchObject({
      'http.response.status_code': 404,
      'sluice.outcome': 'error',
    });
    expect(typeof attrs(server.attributes)['error.type']).toBe('string');
  });

  it('tracing off: nothing is exported and no traceparent is added', async () => {
    const workers = await fx.mocks(1);
    const gw = await fx.gateway({
      tracing: { enabled: false, endpoint: receiver.url, batchDelayMs: 20 },
      workers: [{ url: workers[0]!.url }],
    });
    expect(gw.context.tracing).toBeUndefined();
    const res = await post(`${gw.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 3 }));
    expect(res.status).toBe(200);
    expect(workers[0]!.stats.lastHeaders.at(-1)!.traceparent).toBeUndefined();
    // A client's own traceparent passes through the allowlist unchanged.
    const own = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await post(`${gw.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), { traceparent: own });
    expect(workers[0]!.stats.lastHeaders.at(-1)!.traceparent).toBe(own);
    await gw.close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(receiver.bodies).toHaveLength(0);
  });

  it('an unsampled request (sampleRatio 0) exports nothing and adds no traceparent', async () => {
    const workers = await fx.mocks(1);
    const gw0 = await fx.gateway({
      tracing: { enabled: true, endpoint: receiver.url, batchDelayMs: 20, sampleRatio: 0 },
      workers: [{ url: workers[0]!.url }],
    });
    const res = await post(`${gw0.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 3 }));
    expect(res.status).toBe(200);
    expect(workers[0]!.stats.lastHeaders.at(-1)!.traceparent).toBeUndefined();
    await gw0.close();
    expect(receiver.spans).toHaveLength(0);
  });
});

describe('tracing configuration', () => {
  it('defaults to off, with the local collector endpoint', () => {
    const config = loadConfig({}, {});
    expect(config.tracing).toEqual({
      enabled: false,
      endpoint: 'http://127.0.0.1:4318/v1/traces',
      serviceName: 'sluice',
      sampleRatio: 1,
      headers: {},
      batchDelayMs: 5000,
      exportTimeoutMs: 10000,
    });
  });

  it('reads the OpenTelemetry variables, below SLUICE_TRACING_* and flags', () => {
    const otel = loadConfig(
      {},
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/',
        OTEL_SERVICE_NAME: 'gw',
        OTEL_EXPORTER_OTLP_HEADERS: 'api-key=a%20b,x=1',
        SLUICE_TRACING_ENABLED: 'true',
        SLUICE_TRACING_SAMPLE_RATIO: '0.25',
      },
    );
    expect(otel.tracing).toMatchObject({
      enabled: true,
      endpoint: 'http://collector:4318/v1/traces',
      serviceName: 'gw',
      sampleRatio: 0.25,
      headers: { 'api-key': 'a b', x: '1' },
    });
    const traces = loadConfig(
      {},
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://other:4318/custom',
        SLUICE_TRACING_SERVICE_NAME: 'mine',
        OTEL_SERVICE_NAME: 'theirs',
      },
    );
    expect(traces.tracing).toMatchObject({
      enabled: false,
      endpoint: 'http://other:4318/custom',
      serviceName: 'mine',
    });
    const flag = loadConfig(
      { tracingEndpoint: 'http://flag:4318/v1/traces' },
      { SLUICE_TRACING_ENDPOINT: 'http://env:4318/v1/traces' },
    );
    expect(flag.tracing).toMatchObject({ enabled: true, endpoint: 'http://flag:4318/v1/traces' });
  });

  it('rejects bad values', () => {
    expect(() => loadConfig({}, { SLUICE_TRACING_ENABLED: 'maybe' })).toThrow(/SLUICE_TRACING_ENABLED/);
    expect(() => loadConfig({}, { SLUICE_TRACING_SAMPLE_RATIO: '2' })).toThrow(/tracing.sampleRatio/);
    expect(() => loadConfig({}, { SLUICE_TRACING_ENDPOINT: 'not a url' })).toThrow(/tracing.endpoint/);
  });
});
