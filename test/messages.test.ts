import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NoWorkerAvailable, QueueFull } from '../src/errors/http-errors.js';
import { InvalidValue } from '../src/errors/request-errors.js';
import { RequestStreamClosed } from '../src/errors/stream-errors.js';
import type { Gateway } from '../src/gateway.js';
import {
  anthropicErrorBody,
  anthropicErrorType,
  anthropicStatus,
  streamErrorBody,
} from '../src/messages/errors.js';
import { toStopReason } from '../src/messages/stop-reason.js';
import { sequence } from '../src/mock/generate.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import {
  eventually,
  metric,
  metricOrZero,
  perTest,
  post,
  startGateway,
  startMocks,
} from './helpers/gateway.js';

/** Anthropic's Messages API in front of the mock worker, driven by the official SDK. */

interface SseEvent {
  event: string;
  data: Record<string, unknown>;
}

function parseSse(text: string): SseEvent[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim().length > 0)
    .map((block) => ({
      event: /^event: (.*)$/m.exec(block)![1]!,
      data: JSON.parse(/^data: (.*)$/m.exec(block)![1]!) as Record<string, unknown>,
    }));
}

const SAMPLING = { temperature: 0.5, top_p: 0.9, top_k: 40 };
/** Greedy sampling on the embedded engine. */
const GREEDY = { temperature: 0 } as object;

interface ChatBody {
  messages: { role: string; content: unknown; tool_calls?: unknown; tool_call_id?: string }[];
  [key: string]: unknown;
}

describe('POST /v1/messages', () => {
  let workers: MockWorker[];
  let gateway: Gateway;
  let client: Anthropic;
  const lastBody = () => workers[0]!.stats.lastBodies.at(-1) as ChatBody;

  beforeAll(async () => {
    workers = await startMocks(1, { models: ['mock-model', 'other-model'] });
    gateway = await startGateway({ workers: [{ url: workers[0]!.url }] });
    client = new Anthropic({ baseURL: gateway.url, apiKey: 'x', maxRetries: 0 });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  it('answers a message, translating every parameter onto chat completions', async () => {
    const message = await client.messages.create({
      model: 'mock-model',
      max_tokens: 5,
      system: [
        { type: 'text', text: 'You are terse.' },
        { type: 'text', text: 'Answer in English.' },
      ],
      messages: [{ role: 'user', content: 'hello there' }],
      stop_sequences: ['zzz'],
      metadata: { user_id: 'user-7' },
      // Sampling parameters this SDK's types no longer list; the API (and sluice) take them.
      ...(SAMPLING as object),
    });
    expect(message.id).toMatch(/^msg_/);
    expect(message.type).toBe('message');
    expect(message.role).toBe('assistant');
    expect(message.model).toBe('mock-model');
    expect(message.content).toEqual([{ type: 'text', text: sequence(5) }]);
    expect(message.stop_reason).toBe('max_tokens');
    expect(message.stop_sequence).toBeNull();
    expect(message.usage.output_tokens).toBe(5);
    expect(message.usage.input_tokens).toBeGreaterThan(0);
    const sent = lastBody();
    expect(sent).toMatchObject({
      model: 'mock-model',
      max_tokens: 5,
      stop: ['zzz'],
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      user: 'user-7',
    });
    expect(sent.stream).toBeUndefined();
    expect(sent.messages).toEqual([
      { role: 'system', content: 'You are terse.\nAnswer in English.' },
      { role: 'user', content: 'hello there' },
    ]);
  });

  it('finish_reason stop is end_turn; length is max_tokens', async () => {
    // The mock stops on its own (finish "stop") when no max_tokens reaches it; a stop string does too.
    const stopped = await client.messages.create({
      model: 'mock-model',
      max_tokens: 50,
      messages: [{ role: 'user', content: 'x' }],
      stop_sequences: [' fox'],
    });
    expect(stopped.stop_reason).toBe('end_turn');
    expect(stopped.content).toEqual([{ type: 'text', text: sequence(3) }]);
  });

  it('streams the exact Anthropic event sequence, with usage and no usage chunk leaked', async () => {
    const res = await post(`${gateway.url}/v1/messages`, {
      model: 'mock-model',
      max_tokens: 4,
      stream: true,
      messages: [{ role: 'user', content: 'hello there' }],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = parseSse(res.text);
    for (const e of events) expect(e.data.type).toBe(e.event);
    expect(events.map((e) => e.event)).toEqual([
      'message_start',
      'ping',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const start = events[0]!.data.message as Record<string, unknown>;
    expect(start).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'mock-model',
      content: [],
      stop_reason: null,
    });
    expect(events[2]!.data).toEqual({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'text', text: '' },
    });
    expect(events[3]!.data).toEqual({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'text_delta', text: ' the' },
    });
    const delta = events.at(-2)!.data as {
      delta: unknown;
      usage: { output_tokens: number; input_tokens: number };
    };
    expect(delta.delta).toEqual({ stop_reason: 'max_tokens', stop_sequence: null });
    expect(delta.usage.output_tokens).toBe(4);
    expect(delta.usage.input_tokens).toBe(2);
    expect(res.text).not.toContain('prompt_tokens');
    // Usage was asked of the engine.
    expect(lastBody().stream_options).toEqual({ include_usage: true });
  });

  it('messages.stream(...).finalMessage() assembles the streamed message', async () => {
    const stream = client.messages.stream({
      model: 'mock-model',
      max_tokens: 6,
      messages: [{ role: 'user', content: 'hello' }],
    });
    let text = '';
    stream.on('text', (piece) => {
      text += piece;
    });
    const message = await stream.finalMessage();
    expect(text).toBe(sequence(6));
    expect(message.content).toEqual([{ type: 'text', text: sequence(6) }]);
    expect(message.stop_reason).toBe('max_tokens');
    expect(message.usage.output_tokens).toBe(6);
    expect(message.usage.input_tokens).toBe(1);
  });

  const tools: Anthropic.Tool[] = [
    {
      name: 'get_weather',
      description: 'The weather in a city',
      input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  ];

  it('a tool-use round trip: tool_use blocks out, tool_result back as a tool message', async () => {
    const first = await client.messages.create(
      { model: 'mock-model', max_tokens: 50, tools, messages: [{ role: 'user', content: 'weather?' }] },
      { headers: { 'x-mock-tool-call': 'get_weather' } },
    );
    expect(first.stop_reason).toBe('tool_use');
    const use = first.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
    expect(use.id).toMatch(/^toolu_/);
    expect(use.name).toBe('get_weather');
    expect(use.input).toEqual({ city: 'Paris', unit: 'celsius' });
    expect(lastBody().tools).toEqual([
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'The weather in a city',
          parameters: tools[0]!.input_schema,
        },
      },
    ]);

    const second = await client.messages.create({
      model: 'mock-model',
      max_tokens: 3,
      tools,
      messages: [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: use.id, content: '18 degrees' },
            { type: 'text', text: 'and tomorrow?' },
          ],
        },
      ],
    });
    expect(second.stop_reason).toBe('max_tokens');
    expect(lastBody().messages).toEqual([
      { role: 'user', content: 'weather?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: use.id,
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: use.id, content: '18 degrees' },
      { role: 'user', content: 'and tomorrow?' },
    ]);
  });

  it('streams a tool call as a tool_use block with input_json_delta fragments', async () => {
    const stream = client.messages.stream(
      { model: 'mock-model', max_tokens: 50, tools, messages: [{ role: 'user', content: 'weather?' }] },
      { headers: { 'x-mock-tool-call': 'get_weather' } },
    );
    const partials: string[] = [];
    stream.on('inputJson', (partial) => partials.push(partial));
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe('tool_use');
    expect(partials.join('')).toBe('{"city":"Paris","unit":"celsius"}');
    expect(partials.length).toBeGreaterThan(1);
    const use = message.content[0] as Anthropic.ToolUseBlock;
    expect(use.type).toBe('tool_use');
    expect(use.id).toMatch(/^toolu_/);
    expect(use.input).toEqual({ city: 'Paris', unit: 'celsius' });
  });

  it('maps tool_choice: any → required, tool → a named function, none, and disable_parallel_tool_use', async () => {
    const ask = (tool_choice: Anthropic.ToolChoice) =>
      client.messages.create({
        model: 'mock-model',
        max_tokens: 2,
        tools,
        tool_choice,
        messages: [{ role: 'user', content: 'x' }],
      });
    await ask({ type: 'any' });
    expect(lastBody().tool_choice).toBe('required');
    await ask({ type: 'tool', name: 'get_weather', disable_parallel_tool_use: true });
    expect(lastBody().tool_choice).toEqual({ type: 'function', function: { name: 'get_weather' } });
    expect(lastBody().parallel_tool_calls).toBe(false);
    await ask({ type: 'none' });
    expect(lastBody().tool_choice).toBe('none');
    await ask({ type: 'auto' });
    expect(lastBody().tool_choice).toBe('auto');
  });

  it('images, base64 and URL, reach the engine as image_url parts', async () => {
    await client.messages.create({
      model: 'mock-model',
      max_tokens: 2,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this?' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
          ],
        },
      ],
    });
    expect(lastBody().messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'what is this?' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
        ],
      },
    ]);
  });

  it('reasoning becomes a thinking block (with its signature) before the text, streamed and not', async () => {
    const params = {
      model: 'mock-model',
      max_tokens: 3,
      thinking: { type: 'enabled' as const, budget_tokens: 1024 },
      messages: [{ role: 'user' as const, content: 'think' }],
    };
    const options = { headers: { 'x-mock-reasoning': '4' } };
    const whole = await client.messages.create(params, options);
    expect(lastBody().chat_template_kwargs).toEqual({ enable_thinking: true });
    expect(whole.content.map((b) => b.type)).toEqual(['thinking', 'text']);
    const thinking = whole.content[0] as Anthropic.ThinkingBlock;
    expect(thinking.thinking.length).toBeGreaterThan(0);
    expect(thinking.signature).toBe('');

    const res = await post(`${gateway.url}/v1/messages`, { ...params, stream: true }, options.headers);
    const events = parseSse(res.text);
    const deltas = events
      .filter((e) => e.event === 'content_block_delta')
      .map((e) => (e.data.delta as { type: string }).type);
    expect(deltas).toEqual([
      'thinking_delta',
      'thinking_delta',
      'thinking_delta',
      'thinking_delta',
      'signature_delta',
      'text_delta',
      'text_delta',
      'text_delta',
    ]);
    const starts = events.filter((e) => e.event === 'content_block_start').map((e) => e.data);
    expect(starts).toEqual([
      {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'thinking', thinking: '', signature: '' },
      },
      { type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } },
    ]);

    const streamed = await client.messages.stream(params, options).finalMessage();
    expect((streamed.content[0] as Anthropic.ThinkingBlock).thinking).toBe(thinking.thinking);
    expect((streamed.content[1] as Anthropic.TextBlock).text).toBe(sequence(3));
  });

  it('a final assistant message is a prefill the engine continues', async () => {
    const message = await client.messages.create({
      model: 'mock-model',
      max_tokens: 3,
      messages: [
        { role: 'user', content: 'go on' },
        { role: 'assistant', content: ' the quick' },
      ],
    });
    expect(message.content).toEqual([{ type: 'text', text: sequence(3, 2) }]);
    expect(lastBody()).toMatchObject({ continue_final_message: true, add_generation_prompt: false });
    await client.messages.create({
      model: 'mock-model',
      max_tokens: 1,
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(lastBody().continue_final_message).toBeUndefined();
  });

  it('a thinking block sent back is not sent to the engine', async () => {
    await client.messages.create({
      model: 'mock-model',
      max_tokens: 2,
      messages: [
        { role: 'user', content: 'a' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: '' },
            { type: 'text', text: 'b' },
          ],
        },
        { role: 'user', content: 'c' },
      ],
    });
    expect(lastBody().messages[1]).toEqual({ role: 'assistant', content: 'b' });
  });

  it('count_tokens estimates when the engine has no tokenizer, and says so', async () => {
    const res = await post(`${gateway.url}/v1/messages/count_tokens`, {
      model: 'mock-model',
      system: 'abcd',
      messages: [{ role: 'user', content: 'abcdefgh' }],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-token-count')).toBe('estimate');
    expect(res.json()).toEqual({ input_tokens: 3 });
    const counted = await client.messages.countTokens({
      model: 'mock-model',
      messages: [{ role: 'user', content: 'x'.repeat(40) }],
    });
    expect(counted.input_tokens).toBe(10);
    expect(
      await metric(gateway.url, 'sluice_requests_total', { route: 'messages_count_tokens', status: '200' }),
    ).toBe(2);
  });

  it('requests are counted and timed under route="messages"', async () => {
    const before = await metricOrZero(gateway.url, 'sluice_requests_total', {
      route: 'messages',
      status: '200',
    });
    await client.messages.create({
      model: 'mock-model',
      max_tokens: 1,
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(await metric(gateway.url, 'sluice_requests_total', { route: 'messages', status: '200' })).toBe(
      before + 1,
    );
    expect(
      await metric(gateway.url, 'sluice_request_duration_seconds_count', {
        route: 'messages',
        model: 'mock-model',
      }),
    ).toBeGreaterThan(0);
  });

  it('a client that goes away mid-stream aborts the engine at once and is counted', async () => {
    const slow = await startMocks(1, { tokensPerSecond: 50 });
    const gw = await startGateway({ workers: [{ url: slow[0]!.url }] });
    try {
      const sdk = new Anthropic({ baseURL: gw.url, apiKey: 'x', maxRetries: 0 });
      const stream = sdk.messages.stream({
        model: 'mock-model',
        max_tokens: 500,
        messages: [{ role: 'user', content: 'x' }],
      });
      let pieces = 0;
      for await (const event of stream) {
        if (event.type === 'content_block_delta' && ++pieces === 3) break;
      }
      await eventually(() => slow[0]!.stats.aborted === 1);
      await eventually(
        async () =>
          (await metric(gw.url, 'sluice_client_disconnects_total', {
            api: 'messages',
            model: 'mock-model',
          })) === 1,
      );
      expect(await metric(gw.url, 'sluice_requests_total', { route: 'messages', status: '499' })).toBe(1);
    } finally {
      await gw.close();
      await slow[0]!.close();
    }
  });
});

describe('Messages API errors are Anthropic-shaped', () => {
  const fx = perTest();

  it('unknown model 404, missing max_tokens 400, unknown field 400, bad JSON 400; other routes stay OpenAI-shaped', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const client = new Anthropic({ baseURL: gateway.url, apiKey: 'x', maxRetries: 0 });
    const unknown = await post(`${gateway.url}/v1/messages`, {
      model: 'nope',
      max_tokens: 5,
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(unknown.status).toBe(404);
    expect(unknown.json()).toMatchObject({
      type: 'error',
      error: { type: 'not_found_error', code: 'model_not_found' },
    });
    const error = await client.messages
      .create({ model: 'nope', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] })
      .catch((err: unknown) => err);
    expect(error).toBeInstanceOf(Anthropic.NotFoundError);
    expect((error as InstanceType<typeof Anthropic.NotFoundError>).type).toBe('not_found_error');

    const missing = await post(`${gateway.url}/v1/messages`, {
      model: 'mock-model',
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(missing.status).toBe(400);
    expect(missing.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code: 'missing_required_parameter', param: 'max_tokens' },
    });
    const extra = await post(`${gateway.url}/v1/messages`, {
      model: 'mock-model',
      max_tokens: 5,
      messages: [{ role: 'user', content: 'x' }],
      frequency_penalty: 1,
    });
    expect(extra.status).toBe(400);
    expect((extra.json() as { error: { type: string } }).error.type).toBe('invalid_request_error');
    const badBlock = await post(`${gateway.url}/v1/messages`, {
      model: 'mock-model',
      max_tokens: 5,
      messages: [{ role: 'user', content: [{ type: 'document', source: {} }] }],
    });
    expect(badBlock.status).toBe(400);
    const badJson = await post(`${gateway.url}/v1/messages`, '{"model":');
    expect(badJson.status).toBe(400);
    expect(badJson.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    const badCount = await post(`${gateway.url}/v1/messages/count_tokens`, { model: 'nope', messages: [] });
    expect(badCount.status).toBe(404);
    expect((badCount.json() as { type: string }).type).toBe('error');

    const chat = await post(`${gateway.url}/v1/chat/completions`, {
      model: 'nope',
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(chat.status).toBe(404);
    expect(chat.json()).toMatchObject({ error: { code: 'model_not_found', type: 'not_found_error' } });
    expect((chat.json() as { type?: unknown }).type).toBeUndefined();
  });

  it('a body over the limit is 413 request_too_large', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({
      workers: [{ url: workers[0]!.url }],
      server: { bodyLimitBytes: 1024 },
    });
    const big = await post(`${gateway.url}/v1/messages`, {
      model: 'mock-model',
      max_tokens: 5,
      messages: [{ role: 'user', content: 'x'.repeat(4096) }],
    });
    expect(big.status).toBe(413);
    expect(big.json()).toMatchObject({
      type: 'error',
      error: { type: 'request_too_large', code: 'payload_too_large' },
    });
  });

  it('no worker available is 529 overloaded_error; an engine failure before the first byte is api_error', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }], retry: { maxAttempts: 1 } });
    const body = {
      model: 'mock-model',
      max_tokens: 5,
      stream: true,
      messages: [{ role: 'user', content: 'x' }],
    };
    const failed = await post(`${gateway.url}/v1/messages`, body, { 'x-mock-fault': 'http_500' });
    expect(failed.status).toBe(502);
    expect(failed.json()).toMatchObject({
      type: 'error',
      error: { type: 'api_error', code: 'upstream_http_error' },
    });
    const busy = await post(`${gateway.url}/v1/messages`, body, { 'x-mock-fault': 'http_503' });
    expect(busy.status).toBe(503);
    expect((busy.json() as { error: { type: string } }).error.type).toBe('overloaded_error');
    workers[0]!.setHealthy(false);
    await eventually(async () => {
      const res = await post(`${gateway.url}/v1/messages`, body);
      return res.status === 529;
    });
    const none = await post(`${gateway.url}/v1/messages`, { ...body, stream: false });
    expect(none.status).toBe(529);
    expect(none.json()).toMatchObject({
      type: 'error',
      error: { type: 'overloaded_error', code: 'no_worker_available' },
    });
    expect(none.headers.get('retry-after')).toBe('1');
    expect(none.headers.get('request-id')).toMatch(/\S/);
  });

  describe('with API keys', () => {
    const ADMIN = 'admin-key-for-tests-0123456789';
    let workers: MockWorker[];
    let gateway: Gateway;
    const createKey = async (body: Record<string, unknown>): Promise<{ id: string; key: string }> => {
      const res = await fetch(`${gateway.url}/admin/keys`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(201);
      return (await res.json()) as { id: string; key: string };
    };
    const ask = { model: 'mock-model', max_tokens: 3, messages: [{ role: 'user' as const, content: 'x' }] };

    beforeAll(async () => {
      workers = await startMocks(1, { models: ['mock-model', 'other-model'] });
      gateway = await startGateway({ auth: { adminKey: ADMIN }, workers: [{ url: workers[0]!.url }] });
    });
    afterAll(async () => {
      await gateway.close();
      await Promise.all(workers.map((w) => w.close()));
    });

    it('x-api-key and Authorization: Bearer both authenticate; a bad key is 401 authentication_error', async () => {
      const { key } = await createKey({ models: ['mock-model'] });
      const viaApiKey = new Anthropic({ baseURL: gateway.url, apiKey: key, maxRetries: 0 });
      expect((await viaApiKey.messages.create(ask)).type).toBe('message');
      const viaBearer = new Anthropic({ baseURL: gateway.url, apiKey: null, authToken: key, maxRetries: 0 });
      expect((await viaBearer.messages.create(ask)).type).toBe('message');
      const counted = await viaApiKey.messages.countTokens({ model: 'mock-model', messages: ask.messages });
      expect(counted.input_tokens).toBeGreaterThan(0);
      // Neither the key nor the Anthropic headers go upstream.
      const upstream = workers[0]!.stats.lastHeaders.at(-1)!;
      expect(upstream['x-api-key']).toBeUndefined();
      expect(upstream['anthropic-version']).toBeUndefined();

      const bad = new Anthropic({ baseURL: gateway.url, apiKey: 'sk-wrong', maxRetries: 0 });
      const error = await bad.messages.create(ask).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(Anthropic.AuthenticationError);
      const raw = await post(`${gateway.url}/v1/messages`, ask, { 'x-api-key': 'sk-wrong' });
      expect(raw.status).toBe(401);
      expect(raw.json()).toMatchObject({
        type: 'error',
        error: { type: 'authentication_error', code: 'invalid_api_key' },
      });

      const forbidden = await post(
        `${gateway.url}/v1/messages`,
        { ...ask, model: 'other-model' },
        { 'x-api-key': key },
      );
      expect(forbidden.status).toBe(403);
      expect(forbidden.json()).toMatchObject({
        error: { type: 'permission_error', code: 'model_not_allowed' },
      });
    });

    it('over the rate limit: 429 rate_limit_error; usage is recorded against the key', async () => {
      const { key, id } = await createKey({ rpm: 2 });
      const sdk = new Anthropic({ baseURL: gateway.url, apiKey: key, maxRetries: 0 });
      await sdk.messages.create(ask);
      await sdk.messages.stream(ask).finalMessage();
      const error = await sdk.messages.create(ask).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(Anthropic.RateLimitError);
      const refused = await post(`${gateway.url}/v1/messages`, ask, { 'x-api-key': key });
      expect(refused.status).toBe(429);
      expect(refused.json()).toMatchObject({
        type: 'error',
        error: { type: 'rate_limit_error', code: 'rate_limit_exceeded' },
      });
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      const usage = (await (
        await fetch(`${gateway.url}/admin/keys/${id}/usage`, {
          headers: { authorization: `Bearer ${ADMIN}` },
        })
      ).json()) as Record<string, number>;
      expect(usage).toMatchObject({ requests: 2, completion_tokens: 6 });
    });
  });
});

describe('count_tokens with an engine tokenizer', () => {
  let tokenizer: Server;
  let gateway: Gateway;
  let url: string;
  let tokenizeBodies: unknown[] = [];
  let delayMs = 0;

  beforeAll(async () => {
    tokenizer = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => {
        body += c.toString();
      });
      req.on('end', () => {
        if (req.url === '/v1/models') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ object: 'list', data: [{ id: 'tok-model', object: 'model' }] }));
        } else if (req.url === '/tokenize') {
          tokenizeBodies.push(JSON.parse(body));
          setTimeout(() => {
            res.writeHead(200, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ count: 42, max_model_len: 4096, tokens: [] }));
          }, delayMs);
        } else {
          res.writeHead(200).end();
        }
      });
    });
    await new Promise<void>((resolve) => tokenizer.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(tokenizer.address() as AddressInfo).port}`;
    gateway = await startGateway({ workers: [{ url }] });
    await eventually(async () => (await fetch(`${gateway.url}/health/ready`)).status === 200);
  });
  afterAll(async () => {
    await gateway.close();
    tokenizer.closeAllConnections();
    await new Promise((resolve) => tokenizer.close(resolve));
  });

  it("counts with the engine's /tokenize, sending the chat messages and tools", async () => {
    tokenizeBodies = [];
    const res = await post(`${gateway.url}/v1/messages/count_tokens`, {
      model: 'tok-model',
      system: 'be brief',
      messages: [{ role: 'user', content: 'hello' }],
      tools: [{ name: 'f', input_schema: { type: 'object' } }],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-token-count')).toBe('tokenizer');
    expect(res.json()).toEqual({ input_tokens: 42 });
    expect(tokenizeBodies).toEqual([
      {
        model: 'tok-model',
        messages: [
          { role: 'system', content: 'be brief' },
          { role: 'user', content: 'hello' },
        ],
        add_generation_prompt: true,
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      },
    ]);
  });

  it('a tokenizer slower than its timeout gives way to the estimate', async () => {
    delayMs = 1_500;
    try {
      const res = await post(`${gateway.url}/v1/messages/count_tokens`, {
        model: 'tok-model',
        messages: [{ role: 'user', content: 'hello world!' }],
      });
      expect(res.headers.get('x-sluice-token-count')).toBe('estimate');
      expect(res.json()).toEqual({ input_tokens: 3 });
    } finally {
      delayMs = 0;
    }
  });
});

describe('against the embedded llama.cpp engine', () => {
  it('answers /v1/messages streamed and not, through a real sluice worker', async () => {
    const { mkdtemp, rm } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { createLlamaWorker } = await import('../src/engine/llama-worker.js');
    const { writeTinyModel } = await import('../src/engine/tiny-model.js');
    const dir = await mkdtemp(join(tmpdir(), 'sluice-messages-'));
    const modelPath = join(dir, 'tiny.gguf');
    await writeTinyModel(modelPath, { seed: 1 });
    const worker = await createLlamaWorker({ modelPath, slots: 2, modelName: 'tiny' });
    const gw = await startGateway({ workers: [{ url: worker.url }] });
    try {
      await eventually(async () => (await fetch(`${gw.url}/health/ready`)).status === 200, 10_000);
      const sdk = new Anthropic({ baseURL: gw.url, apiKey: 'x', maxRetries: 0 });
      const whole = await sdk.messages.create({
        model: 'tiny',
        max_tokens: 8,
        ...GREEDY,
        messages: [{ role: 'user', content: 'Hello' }],
      });
      expect(whole.stop_reason).toBe('max_tokens');
      expect(whole.usage.output_tokens).toBe(8);
      const text = (whole.content[0] as Anthropic.TextBlock).text;
      expect(text.length).toBeGreaterThan(0);
      const streamed = await sdk.messages
        .stream({
          model: 'tiny',
          max_tokens: 8,
          ...GREEDY,
          messages: [{ role: 'user', content: 'Hello' }],
        })
        .finalMessage();
      expect(streamed.stop_reason).toBe('max_tokens');
      expect((streamed.content[0] as Anthropic.TextBlock).text).toBe(text);
      expect(streamed.usage.output_tokens).toBe(8);
      // A stop string the engine reports (vLLM's stop_reason) is Anthropic's stop_sequence.
      const cut = text.trim().slice(2, 4);
      expect(cut).toHaveLength(2);
      const stopped = await sdk.messages.create({
        model: 'tiny',
        max_tokens: 8,
        ...GREEDY,
        stop_sequences: [cut],
        messages: [{ role: 'user', content: 'Hello' }],
      });
      expect(stopped.stop_reason).toBe('stop_sequence');
      expect(stopped.stop_sequence).toBe(cut);
      const stoppedStream = await sdk.messages
        .stream({
          model: 'tiny',
          max_tokens: 8,
          ...GREEDY,
          stop_sequences: [cut],
          messages: [{ role: 'user', content: 'Hello' }],
        })
        .finalMessage();
      expect(stoppedStream.stop_reason).toBe('stop_sequence');
      expect(stoppedStream.stop_sequence).toBe(cut);
      expect(stoppedStream.content).toEqual(stopped.content);
      const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
      // The chat route is untouched by the Messages front.
      const chat = await client.chat.completions.create({
        model: 'tiny',
        max_tokens: 2,
        messages: [{ role: 'user', content: 'Hello' }],
      });
      expect(chat.choices[0]!.finish_reason).toBe('length');
    } finally {
      await gw.close();
      await worker.close();
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('the mappings, one by one', () => {
  it('finish_reason → stop_reason', () => {
    expect(toStopReason('stop', null, undefined)).toEqual({ stop_reason: 'end_turn', stop_sequence: null });
    expect(toStopReason('stop', 'END', ['END'])).toEqual({
      stop_reason: 'stop_sequence',
      stop_sequence: 'END',
    });
    // A stop the client did not ask for (an EOS token id, a server-side stop) is the end of the turn.
    expect(toStopReason('stop', 'other', ['END'])).toEqual({ stop_reason: 'end_turn', stop_sequence: null });
    expect(toStopReason('stop', 151645, ['END'])).toEqual({ stop_reason: 'end_turn', stop_sequence: null });
    expect(toStopReason('length', null, undefined).stop_reason).toBe('max_tokens');
    expect(toStopReason('tool_calls', null, undefined).stop_reason).toBe('tool_use');
    expect(toStopReason('function_call', null, undefined).stop_reason).toBe('tool_use');
    expect(toStopReason('content_filter', null, undefined).stop_reason).toBe('refusal');
  });

  it('status → Anthropic error type, with 529 for a gateway without room', () => {
    const table: [number, string][] = [
      [400, 'invalid_request_error'],
      [401, 'authentication_error'],
      [403, 'permission_error'],
      [404, 'not_found_error'],
      [409, 'invalid_request_error'],
      [413, 'request_too_large'],
      [415, 'invalid_request_error'],
      [429, 'rate_limit_error'],
      [500, 'api_error'],
      [502, 'api_error'],
      [503, 'overloaded_error'],
      [504, 'api_error'],
      [529, 'overloaded_error'],
    ];
    for (const [status, type] of table) expect(anthropicErrorType(status)).toBe(type);
    expect(anthropicStatus(new NoWorkerAvailable('m'))).toBe(529);
    expect(anthropicStatus(new QueueFull('w'))).toBe(529);
    expect(anthropicErrorBody(new InvalidValue('bad', 'messages[0]'), 'req-1')).toEqual({
      type: 'error',
      error: { type: 'invalid_request_error', message: 'bad', code: 'invalid_value', param: 'messages[0]' },
      request_id: 'req-1',
    });
    expect(streamErrorBody(new RequestStreamClosed('r1')).error).toMatchObject({
      type: 'api_error',
      code: 'request_stream_closed',
    });
  });
});
