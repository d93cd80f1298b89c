import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMockWorker, type MockWorker, parseFault } from '../src/mock/mock-worker.js';
import { sequence, tokensAlreadyWritten } from '../src/mock/tokens.js';
import { post } from './helpers/gateway.js';

describe('the mock engine', () => {
  let mock: MockWorker;
  let client: OpenAI;
  beforeAll(async () => {
    mock = await createMockWorker({ models: ['m'] });
    client = new OpenAI({ baseURL: `${mock.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  afterAll(async () => {
    await mock.close();
  });

  it('parses fault specs and names a bad one', () => {
    expect(parseFault('reset_after:3,delay_first:10')).toEqual({
      after: { kind: 'reset_after', n: 3 },
      delayFirstMs: 10,
    });
    expect(parseFault('http_429')).toEqual({ status: 429 });
    expect(() => parseFault('explode')).toThrow(/unknown fault 'explode'/);
    expect(() => parseFault('stall_after')).toThrow(/needs a non-negative integer/);
    expect(() => parseFault('no_done:1')).toThrow(/takes no argument/);
  });

  it('answers a bad fault header with 400 and an unknown model with vLLM’s 404', async () => {
    const bad = await post(
      `${mock.url}/v1/chat/completions`,
      { model: 'm', messages: [] },
      { 'x-mock-fault': 'x' },
    );
    expect(bad.status).toBe(400);
    const unknown = await post(`${mock.url}/v1/chat/completions`, { model: 'nope', messages: [] });
    expect(unknown.status).toBe(404);
    expect(unknown.json()).toMatchObject({ object: 'error', type: 'NotFoundError', code: 404 });
  });

  it('generates the deterministic sequence, and continues it from partial text', async () => {
    const full = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 6,
    });
    expect(full.choices[0]!.message.content).toBe(sequence(6));
    expect(tokensAlreadyWritten(sequence(4))).toBe(4);
    expect(tokensAlreadyWritten(`prompt text${sequence(3)}`)).toBe(3);
    const rest = await post(`${mock.url}/v1/chat/completions`, {
      model: 'm',
      messages: [
        { role: 'user', content: 'x' },
        { role: 'assistant', content: sequence(4) },
      ],
      continue_final_message: true,
      add_generation_prompt: false,
      max_tokens: 2,
    });
    const message = (rest.json() as { choices: { message: { content: string } }[] }).choices[0]!.message
      .content;
    expect(sequence(4) + message).toBe(sequence(6));
  });

  it('streams n choices, tool calls and reasoning in vLLM’s shapes', async () => {
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 3,
      n: 2,
      stream: true,
    });
    const texts = ['', ''];
    const finishes: (string | null)[] = [null, null];
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        texts[choice.index] += choice.delta.content ?? '';
        finishes[choice.index] = choice.finish_reason ?? finishes[choice.index]!;
      }
    }
    expect(texts).toEqual([sequence(3), sequence(3)]);
    expect(finishes).toEqual(['length', 'length']);

    const tool = await client.chat.completions.create(
      {
        model: 'm',
        messages: [{ role: 'user', content: 'weather?' }],
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
        stream: true,
      },
      { headers: { 'x-mock-tool-call': 'get_weather', 'x-mock-reasoning': '2' } },
    );
    let args = '';
    let name = '';
    let reasoning = '';
    let finish: string | null = null;
    for await (const chunk of tool) {
      const delta = chunk.choices[0]?.delta as {
        reasoning_content?: string;
      } & OpenAI.Chat.ChatCompletionChunk.Choice.Delta;
      reasoning += delta?.reasoning_content ?? '';
      for (const call of delta?.tool_calls ?? []) {
        name += call.function?.name ?? '';
        args += call.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(reasoning.trim().split(' ')).toHaveLength(2);
    expect(name).toBe('get_weather');
    expect(JSON.parse(args)).toEqual({ city: 'Paris', unit: 'celsius' });
    expect(finish).toBe('tool_calls');
  });
});
