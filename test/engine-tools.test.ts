import OpenAI from 'openai';
import type { ChatCompletionChunk, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Gateway } from '../src/gateway.js';
import { post, startGateway } from './helpers/gateway.js';
import { LlamaProcess } from './helpers/llama-process.js';

/**
 * Tools, natural ends and images on a real `sluice worker` process (llama.cpp, the tiny model):
 * a forced tool call always comes back as a call whose arguments match the tool's schema.
 */

const MODEL = 'tiny';

const weather: ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        days: { type: 'integer' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city', 'days'],
    },
  },
};
const search: ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'search',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string' },
        limit: { type: 'number' },
        exact: { type: 'boolean' },
        tags: { type: 'array', items: { type: 'string' } },
      },
      required: ['query'],
    },
  },
};

/** The tools' schemas, as a client would check the arguments it gets. */
const argumentSchemas: Record<string, z.ZodType> = {
  get_weather: z.strictObject({
    city: z.string(),
    days: z.number().int(),
    unit: z.enum(['celsius', 'fahrenheit']).optional(),
  }),
  search: z.strictObject({
    query: z.string(),
    limit: z.number().optional(),
    exact: z.boolean().optional(),
    tags: z.array(z.string()).optional(),
  }),
};

function expectValidArguments(name: string, text: string): void {
  const parsed: unknown = JSON.parse(text);
  const result = argumentSchemas[name]!.safeParse(parsed);
  expect(result.success, `${name}(${text}): ${result.error?.message}`).toBe(true);
}

describe('tools and natural ends on the llama.cpp worker', { timeout: 120_000 }, () => {
  let worker: LlamaProcess;
  let client: OpenAI;
  const gateways: Gateway[] = [];
  const messages = [{ role: 'user' as const, content: 'What is the weather in Paris?' }];

  beforeAll(async () => {
    worker = new LlamaProcess(await LlamaProcess.tinyModel(), 0, 2);
    await worker.start();
    client = new OpenAI({ baseURL: `${worker.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  afterAll(async () => {
    await Promise.all(gateways.map((g) => g.close()));
    await worker?.kill();
  });

  it('a named tool_choice answers that call with schema-valid arguments, finish tool_calls', async () => {
    for (const seed of [1, 2, 3, 4]) {
      const r = await client.chat.completions.create({
        model: MODEL,
        messages,
        tools: [weather, search],
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        max_tokens: 400,
        seed,
      });
      const choice = r.choices[0]!;
      expect(choice.finish_reason).toBe('tool_calls');
      expect(choice.message.content).toBeNull();
      expect(choice.message.tool_calls).toHaveLength(1);
      const call = choice.message.tool_calls![0]!;
      expect(call.id).toMatch(/^call_[0-9a-f]{24}$/);
      expect(call.type).toBe('function');
      if (call.type !== 'function') throw new Error('not a function call');
      expect(call.function.name).toBe('get_weather');
      expectValidArguments('get_weather', call.function.arguments);
      expect(r.usage!.completion_tokens).toBeLessThan(400);
    }
  });

  it('streams a forced call: id and name first, then argument pieces, finish tool_calls', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      tools: [search],
      tool_choice: { type: 'function', function: { name: 'search' } },
      max_tokens: 400,
      seed: 5,
      stream: true,
    });
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    const deltas = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
    expect(deltas.length).toBeGreaterThan(3);
    expect(deltas[0]).toMatchObject({
      index: 0,
      type: 'function',
      function: { name: 'search', arguments: '' },
    });
    expect(deltas[0]!.id).toMatch(/^call_/);
    for (const delta of deltas.slice(1)) {
      expect(delta.index).toBe(0);
      expect(delta.id).toBeUndefined();
      expect(delta.function?.name).toBeUndefined();
    }
    expect(chunks.some((c) => c.choices[0]?.delta.content)).toBe(false);
    const args = deltas.map((d) => d.function?.arguments ?? '').join('');
    expectValidArguments('search', args);
    expect(chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter(Boolean)).toEqual([
      'tool_calls',
    ]);
    // The same seed gives the same call, streamed or not.
    const whole = await client.chat.completions.create({
      model: MODEL,
      messages,
      tools: [search],
      tool_choice: { type: 'function', function: { name: 'search' } },
      max_tokens: 400,
      seed: 5,
    });
    const call = whole.choices[0]!.message.tool_calls![0]!;
    expect(call.type === 'function' && call.function.arguments).toBe(args);
  });

  it("'required' with two tools calls one of them, with that tool's arguments", async () => {
    const names = new Set<string>();
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const r = await client.chat.completions.create({
        model: MODEL,
        messages,
        tools: [weather, search],
        tool_choice: 'required',
        max_tokens: 400,
        seed,
      });
      const choice = r.choices[0]!;
      expect(choice.finish_reason).toBe('tool_calls');
      const call = choice.message.tool_calls![0]!;
      if (call.type !== 'function') throw new Error('not a function call');
      expect(['get_weather', 'search']).toContain(call.function.name);
      names.add(call.function.name);
      expectValidArguments(call.function.name, call.function.arguments);
    }
    // Streamed: the name is sent once known, the envelope's closing brace is not in the arguments.
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      tools: [weather, search],
      tool_choice: 'required',
      max_tokens: 400,
      seed: 7,
      stream: true,
    });
    const deltas: ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    const reasons: string[] = [];
    for await (const chunk of stream) {
      deltas.push(...(chunk.choices[0]?.delta.tool_calls ?? []));
      if (chunk.choices[0]?.finish_reason) reasons.push(chunk.choices[0].finish_reason);
    }
    const name = deltas[0]!.function!.name!;
    expect(['get_weather', 'search']).toContain(name);
    expectValidArguments(name, deltas.map((d) => d.function?.arguments ?? '').join(''));
    expect(reasons).toEqual(['tool_calls']);
  });

  it("'auto', 'none' and no tools answer text; a bad tool_choice is a 400", async () => {
    for (const tool_choice of ['auto', 'none'] as const) {
      const r = await client.chat.completions.create({
        model: MODEL,
        messages,
        tools: [weather],
        tool_choice,
        max_tokens: 400,
        seed: 1,
      });
      expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
      expect(r.choices[0]!.message.content).toMatch(/\S/);
      expect(r.choices[0]!.finish_reason).toBe('stop');
    }
    const unknown = await post(`${worker.url}/v1/chat/completions`, {
      model: MODEL,
      messages,
      tools: [weather],
      tool_choice: { type: 'function', function: { name: 'nope' } },
    });
    expect(unknown.status).toBe(400);
    expect(unknown.json()).toMatchObject({ param: 'tool_choice', code: 400 });
    const noTools = await post(`${worker.url}/v1/chat/completions`, {
      model: MODEL,
      messages,
      tool_choice: 'required',
    });
    expect(noTools.status).toBe(400);
    // A conversation that went through a call reads back: the call and its result are text.
    const next = await client.chat.completions.create({
      model: MODEL,
      messages: [
        ...messages,
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_1',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Paris","days":1}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      ],
      tools: [weather],
      max_tokens: 5,
    });
    expect(next.choices[0]!.message.content).toMatch(/\S/);
  });

  it('plain answers end by themselves with stop at 20-80 tokens, max_tokens far off', async () => {
    const prompts = ['Hello', 'Tell me a story', 'What is the weather like?', 'hi', 'Explain streams', 'x'];
    const lengths: number[] = [];
    for (const [i, content] of prompts.entries()) {
      const stream = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content }],
        max_tokens: 400,
        seed: 20 + i,
        stream: true,
        stream_options: { include_usage: true },
      });
      let finish: string | null = null;
      let tokens = 0;
      for await (const chunk of stream) {
        finish = chunk.choices[0]?.finish_reason ?? finish;
        tokens = chunk.usage?.completion_tokens ?? tokens;
      }
      expect(finish).toBe('stop');
      lengths.push(tokens);
    }
    for (const length of lengths) {
      expect(length).toBeGreaterThanOrEqual(20);
      expect(length).toBeLessThanOrEqual(80);
    }
  });

  it('an image to this text-only model is a 400 image_input_not_supported on messages', async () => {
    const res = await post(`${worker.url}/v1/chat/completions`, {
      model: MODEL,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in this picture?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
          ],
        },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.json()).toMatchObject({
      object: 'error',
      type: 'BadRequestError',
      param: 'messages',
      code: 'image_input_not_supported',
    });
    expect((res.json() as { message: string }).message).toMatch(/no images/);
    // Text parts alone are fine.
    const text = await post(`${worker.url}/v1/chat/completions`, {
      model: MODEL,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
      max_tokens: 3,
    });
    expect(text.status).toBe(200);
  });

  it('through the gateway, the Responses API with a forced tool_choice returns a function_call', async () => {
    const gateway = await startGateway({ workers: [{ url: worker.url }] });
    gateways.push(gateway);
    const res = await post(`${gateway.url}/v1/responses`, {
      model: MODEL,
      input: 'What is the weather in Paris?',
      tools: [{ type: 'function', name: 'get_weather', parameters: weather.function.parameters }],
      tool_choice: { type: 'function', name: 'get_weather' },
      max_output_tokens: 400,
    });
    expect(res.status).toBe(200);
    const response = res.json() as {
      status: string;
      output: { type: string; name?: string; arguments?: string; call_id?: string; status?: string }[];
    };
    expect(response.status).toBe('completed');
    const calls = response.output.filter((item) => item.type === 'function_call');
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ name: 'get_weather', status: 'completed' });
    expect(calls[0]!.call_id).toMatch(/^call_/);
    expectValidArguments('get_weather', calls[0]!.arguments!);
    expect(response.output.some((item) => item.type === 'message')).toBe(false);
  });
});
