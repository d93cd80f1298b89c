import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, post, startGateway, startMocks } from './helpers/gateway.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

describe('bad input gets an OpenAI-shaped error with the right status', () => {
  let workers: MockWorker[];
  let gateway: Gateway;
  let chat: string;

  beforeAll(async () => {
    workers = await startMocks(1);
    gateway = await startGateway({
      workers: workers.map((w) => ({ url: w.url })),
      server: { bodyLimitBytes: 2048 },
    });
    chat = `${gateway.url}/v1/chat/completions`;
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  const expectError = (res: { status: number; json: () => unknown }, status: number, code: string) => {
    expect(res.status).toBe(status);
    const body = res.json() as ErrorBody;
    expect(Object.keys(body.error).sort()).toEqual(
      expect.arrayContaining(['code', 'message', 'param', 'type']),
    );
    expect(body.error.code).toBe(code);
    expect(body.error.message.length).toBeGreaterThan(10);
    return body.error;
  };

  it('unknown model: 404 model_not_found', async () => {
    const error = expectError(await post(chat, chatBody({ model: 'no-such-model' })), 404, 'model_not_found');
    expect(error.param).toBe('model');
    expect(error.message).toContain('no-such-model');
  });

  it('missing model and messages', async () => {
    const noModel = expectError(await post(chat, { messages: [] }), 400, 'missing_required_parameter');
    expect(noModel.param).toBe('model');
    const noMessages = expectError(
      await post(chat, { model: 'mock-model' }),
      400,
      'missing_required_parameter',
    );
    expect(noMessages.param).toBe('messages');
  });

  it('invalid values name the parameter', async () => {
    const role = expectError(
      await post(chat, chatBody({ messages: [{ role: 'wizard', content: 'x' }] })),
      400,
      'invalid_value',
    );
    expect(role.param).toBe('messages[0].role');
    const temperature = expectError(await post(chat, chatBody({ temperature: 7 })), 400, 'invalid_value');
    expect(temperature.param).toBe('temperature');
    const maxTokens = expectError(await post(chat, chatBody({ max_tokens: -1 })), 400, 'invalid_value');
    expect(maxTokens.param).toBe('max_tokens');
    const stream = expectError(await post(chat, chatBody({ stream: 'yes' })), 400, 'invalid_value');
    expect(stream.param).toBe('stream');
  });

  it('completions need a prompt', async () => {
    const res = await post(`${gateway.url}/v1/completions`, { model: 'mock-model' });
    expect(expectError(res, 400, 'missing_required_parameter').param).toBe('prompt');
  });

  it('malformed JSON, a non-object body, an empty body', async () => {
    expectError(await post(chat, '{"model": "mock-model",'), 400, 'invalid_json');
    expectError(await post(chat, '[1,2]'), 400, 'invalid_body');
    expectError(await post(chat, ''), 400, 'invalid_json');
  });

  it('a wrong content type is a 415', async () => {
    const response = await fetch(chat, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'hi',
    });
    const text = await response.text();
    expectError({ status: response.status, json: () => JSON.parse(text) }, 415, 'unsupported_media_type');
  });

  it('a body over the limit is a 413', async () => {
    const big = chatBody({ messages: [{ role: 'user', content: 'x'.repeat(4096) }] });
    expectError(await post(chat, big), 413, 'payload_too_large');
  });

  it('an unknown URL is an OpenAI-shaped 404', async () => {
    const response = await fetch(`${gateway.url}/v1/nothing-here`);
    const text = await response.text();
    expectError({ status: response.status, json: () => JSON.parse(text) }, 404, 'unknown_url');
  });

  it('a bad data-parallel rank header is a 400', async () => {
    const res = await post(chat, chatBody(), { 'x-data-parallel-rank': 'two' });
    expect(expectError(res, 400, 'invalid_data_parallel_rank').param).toBe('x-data-parallel-rank');
  });

  it('a duplicate in-flight request id is a 409', async () => {
    const slow = { ...chatBody({ stream: true, max_tokens: 3 }) };
    const first = fetch(chat, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-request-id': 'dup-1',
        'x-mock-fault': 'delay_first:400',
      },
      body: JSON.stringify(slow),
    });
    // Event-driven: the first is in flight at the worker (under its id) before the duplicate is sent.
    await eventually(
      () => workers[0]!.stats.inflight === 1 && workers[0]!.stats.requestIds.includes('dup-1'),
    );
    expectError(await post(chat, slow, { 'x-request-id': 'dup-1' }), 409, 'duplicate_request_id');
    expect((await first).status).toBe(200);
  });

  it('the gateway keeps serving after all of this', async () => {
    const res = await post(chat, chatBody({ max_tokens: 2 }));
    expect(res.status).toBe(200);
  });
});
