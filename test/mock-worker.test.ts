import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Clock } from '../src/mock/clock.js';
import { continuePrefix, continueSuffix } from '../src/mock/generate.js';
import {
  createMockWorker,
  FaultSpecError,
  type MockWorker,
  type MockWorkerOptions,
  parseFault,
  sequence,
} from '../src/mock/mock-worker.js';

/** The mock engine on its own, over real HTTP: what the wire shows for each shape and fault. */

interface Chunk {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: {
    index: number;
    delta?: { role?: string; content?: string; reasoning_content?: string; tool_calls?: unknown[] };
    text?: string;
    logprobs: null;
    finish_reason: string | null;
  }[];
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

/** Reads a body to its end, or to the error that cut it; keeps what arrived before. */
async function readBody(res: Response): Promise<{ text: string; error: unknown }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text: text + decoder.decode(), error: undefined };
      text += decoder.decode(value, { stream: true });
    }
  } catch (error) {
    return { text, error };
  }
}

/** The SSE events of a body: `data` payloads, with the `event` name when there is one. */
function events(text: string): { event?: string; data: string }[] {
  return text
    .split('\n\n')
    .filter((block) => block.length > 0)
    .map((block) => {
      const lines = block.split('\n');
      const event = lines.find((l) => l.startsWith('event: '))?.slice(7);
      const data = lines
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      return event === undefined ? { data } : { event, data };
    });
}

const dataOf = (text: string) => events(text).map((e) => e.data);
const chunksOf = (text: string) =>
  dataOf(text)
    .filter((d) => d !== '[DONE]')
    .map((d) => JSON.parse(d) as Chunk);
/** The text of the token chunks of a chat or completions stream. */
const streamedText = (chunks: Chunk[]) =>
  chunks.map((c) => c.choices.map((ch) => ch.delta?.content ?? ch.text ?? '').join('')).join('');
const tokenChunks = (chunks: Chunk[]) =>
  chunks.filter((c) => c.choices.some((ch) => (ch.delta?.content ?? ch.text ?? '').length > 0));

const chat = (extra: Record<string, unknown> = {}) => ({
  model: 'mock-model',
  messages: [{ role: 'user', content: 'hello there friend' }],
  ...extra,
});

async function withMock<T>(options: MockWorkerOptions, run: (mock: MockWorker) => Promise<T>): Promise<T> {
  const mock = await createMockWorker(options);
  try {
    return await run(mock);
  } finally {
    await mock.close();
  }
}

async function eventually(check: () => boolean, ms = 1000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('mock worker', () => {
  let mock: MockWorker;
  let client: OpenAI;

  const post = (path: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) =>
    fetch(`${mock.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      ...(signal ? { signal } : {}),
    });
  /** A streamed chat request with a fault header; resolves to the whole wire text (or what came before the cut). */
  const faulty = async (
    fault: string,
    extra: Record<string, unknown> = {},
    path = '/v1/chat/completions',
  ) => {
    const res = await post(
      path,
      { ...chat({ stream: true, max_tokens: 6 }), ...extra },
      { 'x-mock-fault': fault },
    );
    return { status: res.status, headers: res.headers, ...(await readBody(res)) };
  };

  beforeAll(async () => {
    mock = await createMockWorker({ models: ['mock-model', 'other-model'] });
    client = new OpenAI({ baseURL: `${mock.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  afterAll(async () => {
    await mock.close();
  });

  describe('fault specs', () => {
    it('parses single and combined specs', () => {
      expect(parseFault(undefined).triggers).toEqual([]);
      expect(parseFault('http_429')).toMatchObject({ status: 429, triggers: [] });
      const combined = parseFault('reset_after:5, delay_first:10,malformed_after:2,no_done');
      expect(combined.triggers).toEqual([
        { kind: 'malformed_after', n: 2 },
        { kind: 'reset_after', n: 5 },
      ]);
      expect(combined).toMatchObject({ delayFirstMs: 10, delayHeadersMs: 0, noDone: true, noFinish: false });
    });

    it('throws a FaultSpecError naming the bad part', () => {
      expect(() => parseFault('explode')).toThrow(FaultSpecError);
      expect(() => parseFault('explode')).toThrow(/unknown fault 'explode'.*reset_after:N/);
      expect(() => parseFault('stall_after')).toThrow(/'stall_after' needs a non-negative integer/);
      expect(() => parseFault('stall_after:-1')).toThrow(/non-negative integer/);
      expect(() => parseFault('delay_first:soon')).toThrow(/milliseconds/);
      expect(() => parseFault('no_done:1')).toThrow(/takes no argument/);
    });

    it('an invalid x-mock-fault header is a 400, and nothing is generated', async () => {
      const res = await post('/v1/chat/completions', chat(), { 'x-mock-fault': 'reset_after:x' });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ object: 'error', type: 'BadRequestError', code: 400 });
      expect(() => mock.setFault('nope')).toThrow(FaultSpecError);
    });
  });

  it('the shared clock runs tasks in due order, whatever order they were scheduled in', async () => {
    const clock = new Clock();
    const order: string[] = [];
    const t = clock.now();
    clock.at(t + 30, () => order.push('c'));
    clock.at(t + 40, () => order.push('d'));
    clock.at(t + 10, () => order.push('a')); // earlier than the tail: the heap
    clock.at(t + 20, () => {
      order.push('b');
      clock.at(t + 25, () => order.push('b2')); // scheduled inside a tick, still before c
    });
    clock.soon(() => order.push('soon'));
    await eventually(() => order.length === 6);
    expect(order).toEqual(['soon', 'a', 'b', 'b2', 'c', 'd']);
    expect(clock.now() - t).toBeGreaterThanOrEqual(39);
    clock.close();
    clock.after(0, () => order.push('after close'));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(order).not.toContain('after close');
  });

  describe('deterministic text and continuation', () => {
    it('continuation points: a prefix of the sequence, or a prompt ending with its start', () => {
      expect(continuePrefix(sequence(4))).toEqual({ index: 4, offset: 0 });
      expect(continuePrefix(' the qu')).toEqual({ index: 1, offset: 3 });
      expect(continuePrefix('')).toEqual({ index: 0, offset: 0 });
      expect(continuePrefix(' the slow')).toBeUndefined();
      expect(continueSuffix(`Tell me a story.${sequence(30)}`)).toEqual({ index: 30, offset: 0 });
      expect(continueSuffix('no sequence here')).toBeUndefined();
      expect(continueSuffix(` quick${sequence(2)}`)).toEqual({ index: 2, offset: 0 });
    });

    it('a resumed chat stream reproduces the uninterrupted text and finish', async () => {
      const whole = await client.chat.completions.create({
        model: 'mock-model',
        messages: [{ role: 'user', content: 'hello there friend' }],
        max_tokens: 9,
      });
      const full = whole.choices[0]!;
      expect(full.message.content).toBe(sequence(9));
      expect(full.finish_reason).toBe('length');

      const partial = sequence(4);
      const res = await post(
        '/v1/chat/completions',
        chat({
          messages: [
            { role: 'user', content: 'hello there friend' },
            { role: 'assistant', content: partial },
          ],
          continue_final_message: true,
          add_generation_prompt: false,
          max_tokens: 5,
          stream: true,
        }),
      );
      const chunks = chunksOf((await readBody(res)).text);
      expect(partial + streamedText(chunks)).toBe(full.message.content);
      expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('length');
    });

    it('without the continuation flags the assistant text is not continued', async () => {
      const res = await post(
        '/v1/chat/completions',
        chat({ messages: [{ role: 'assistant', content: sequence(4) }], max_tokens: 2 }),
      );
      const body = (await res.json()) as OpenAI.Chat.ChatCompletion;
      expect(body.choices[0]!.message.content).toBe(sequence(2));
    });

    it('a completions prompt ending with the sequence continues it', async () => {
      const res = await post('/v1/completions', {
        model: 'mock-model',
        prompt: `Once upon a time${sequence(3)}`,
        max_tokens: 2,
      });
      const body = (await res.json()) as OpenAI.Completions.Completion;
      expect(body.choices[0]!.text).toBe(sequence(2, 3));
    });
  });

  describe('healthy requests', () => {
    it('streams a chat completion through the openai SDK, usage included', async () => {
      const stream = await client.chat.completions.create({
        model: 'mock-model',
        messages: [{ role: 'user', content: 'say  five words\nplease' }],
        stream: true,
        max_tokens: 5,
        stream_options: { include_usage: true },
      });
      let text = '';
      let finish: string | null = null;
      let usage: OpenAI.CompletionUsage | null | undefined;
      const ids = new Set<string>();
      for await (const chunk of stream) {
        ids.add(chunk.id);
        text += chunk.choices[0]?.delta.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text).toBe(' the quick brown fox jumps');
      expect(finish).toBe('length');
      expect(usage).toEqual({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 });
      expect([...ids]).toHaveLength(1);
      expect([...ids][0]).toMatch(/^chatcmpl-/);
    });

    it('answers a non-streaming chat completion through the SDK', async () => {
      const completion = await client.chat.completions.create({
        model: 'other-model',
        messages: [{ role: 'user', content: 'hi' }],
        max_completion_tokens: 3,
      });
      expect(completion.object).toBe('chat.completion');
      expect(completion.model).toBe('other-model');
      expect(completion.choices[0]!.message).toMatchObject({ role: 'assistant', content: sequence(3) });
      expect(completion.choices[0]!.finish_reason).toBe('length');
      expect(completion.usage).toEqual({ prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 });
    });

    it('the wire shape of a chat stream is vLLM’s', async () => {
      const res = await post('/v1/chat/completions', chat({ stream: true, max_tokens: 2 }));
      expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
      const { text } = await readBody(res);
      const data = dataOf(text);
      expect(data.at(-1)).toBe('[DONE]');
      const chunks = chunksOf(text);
      expect(chunks).toHaveLength(4);
      for (const c of chunks) {
        expect(c.object).toBe('chat.completion.chunk');
        expect(c.model).toBe('mock-model');
        expect(c.id).toBe(chunks[0]!.id);
        expect(typeof c.created).toBe('number');
      }
      expect(chunks[0]!.choices[0]).toEqual({
        index: 0,
        delta: { role: 'assistant', content: '' },
        logprobs: null,
        finish_reason: null,
      });
      expect(chunks[1]!.choices[0]).toEqual({
        index: 0,
        delta: { content: ' the' },
        logprobs: null,
        finish_reason: null,
      });
      expect(chunks[3]!.choices[0]).toMatchObject({ delta: {}, finish_reason: 'length' });
    });

    it('without max_tokens it generates defaultMaxTokens tokens and finishes "stop"', async () => {
      const res = await post('/v1/chat/completions', chat({ stream: true }));
      const chunks = chunksOf((await readBody(res)).text);
      expect(streamedText(chunks)).toBe(sequence(16));
      expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop');
      expect(chunks.some((c) => c.usage)).toBe(false);
    });

    it('stops at a stop string, streaming and not', async () => {
      const res = await post(
        '/v1/chat/completions',
        chat({ stream: true, max_tokens: 10, stop: ['fox ju'] }),
      );
      const chunks = chunksOf((await readBody(res)).text);
      expect(streamedText(chunks)).toBe(' the quick brown ');
      expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop');
      const plain = (await (
        await post('/v1/completions', { model: 'mock-model', prompt: 'p', max_tokens: 10, stop: ' over' })
      ).json()) as OpenAI.Completions.Completion;
      expect(plain.choices[0]).toMatchObject({ text: sequence(5), finish_reason: 'stop' });
    });

    it('serves completions, streaming (SDK) and not (raw)', async () => {
      const stream = await client.completions.create({
        model: 'mock-model',
        prompt: 'one two three',
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = '';
      let finish: string | null = null;
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of stream) {
        expect(chunk.object).toBe('text_completion');
        expect(chunk.id).toMatch(/^cmpl-/);
        text += chunk.choices[0]?.text ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        usage = chunk.usage ?? usage;
      }
      expect(text).toBe(sequence(3));
      expect(finish).toBe('length');
      expect(usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });

      const res = await post('/v1/completions', { model: 'mock-model', prompt: ['a b', 'c'], max_tokens: 2 });
      const body = (await res.json()) as OpenAI.Completions.Completion;
      expect(body).toMatchObject({ object: 'text_completion', model: 'mock-model' });
      expect(body.choices[0]).toMatchObject({ index: 0, text: sequence(2), finish_reason: 'length' });
      expect(body.usage).toEqual({ prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 });
    });

    it('streams n choices, each with its index and finish', async () => {
      const stream = await client.chat.completions.create({
        model: 'mock-model',
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: 3,
        n: 3,
        stream: true,
      });
      const texts = ['', '', ''];
      const finishes: (string | null)[] = [null, null, null];
      let roles = 0;
      for await (const chunk of stream) {
        for (const choice of chunk.choices) {
          if (choice.delta.role) roles++;
          texts[choice.index] += choice.delta.content ?? '';
          finishes[choice.index] = choice.finish_reason ?? finishes[choice.index]!;
        }
      }
      expect(roles).toBe(3);
      expect(texts).toEqual([sequence(3), sequence(3), sequence(3)]);
      expect(finishes).toEqual(['length', 'length', 'length']);
    });

    it('streams a tool call the vLLM way, after reasoning', async () => {
      const tools: OpenAI.Chat.ChatCompletionTool[] = [
        { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
      ];
      const stream = await client.chat.completions.create(
        { model: 'mock-model', messages: [{ role: 'user', content: 'weather?' }], tools, stream: true },
        { headers: { 'x-mock-tool-call': 'get_weather', 'x-mock-reasoning': '2' } },
      );
      let args = '';
      let name = '';
      let reasoning = '';
      let callId = '';
      let finish: string | null = null;
      for await (const chunk of stream) {
        const delta = chunk.choices[0]?.delta as
          | (OpenAI.Chat.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string })
          | undefined;
        reasoning += delta?.reasoning_content ?? '';
        if (reasoning && !delta?.reasoning_content) expect(delta?.content ?? '').toBe('');
        for (const call of delta?.tool_calls ?? []) {
          expect(call.index).toBe(0);
          callId ||= call.id ?? '';
          name += call.function?.name ?? '';
          args += call.function?.arguments ?? '';
        }
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      expect(reasoning).toBe(sequence(2, 6));
      expect(name).toBe('get_weather');
      expect(callId).toMatch(/^call_/);
      expect(JSON.parse(args)).toEqual({ city: 'Paris', unit: 'celsius' });
      expect(finish).toBe('tool_calls');

      // A tool_choice naming a function is enough; non-streaming returns message.tool_calls.
      const plain = await client.chat.completions.create(
        {
          model: 'mock-model',
          messages: [{ role: 'user', content: 'weather?' }],
          tools,
          tool_choice: { type: 'function', function: { name: 'get_weather' } },
        },
        { headers: { 'x-mock-reasoning': '3' } },
      );
      const message = plain.choices[0]!.message as OpenAI.Chat.ChatCompletionMessage & {
        reasoning_content?: string;
      };
      expect(plain.choices[0]!.finish_reason).toBe('tool_calls');
      expect(message.content).toBeNull();
      expect(message.reasoning_content).toBe(sequence(3, 6));
      const call = message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
      expect(call.function).toEqual({ name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' });
    });

    it('argument fragments are about 4 characters', async () => {
      const res = await post(
        '/v1/chat/completions',
        chat({ stream: true, tools: [{ type: 'function', function: { name: 'f' } }] }),
        { 'x-mock-tool-call': 'f' },
      );
      const fragments = chunksOf((await readBody(res)).text)
        .map((c) => c.choices[0]?.delta?.tool_calls?.[0] as { function?: { arguments?: string } } | undefined)
        .map((t) => t?.function?.arguments)
        .filter((a): a is string => typeof a === 'string' && a.length > 0);
      expect(fragments.length).toBeGreaterThan(5);
      expect(fragments.every((f) => f.length <= 4)).toBe(true);
    });
  });

  describe('errors, endpoints and stats', () => {
    it('an unknown model is vLLM’s 404; invalid JSON a 400', async () => {
      const unknown = await post('/v1/chat/completions', chat({ model: 'x' }));
      expect(unknown.status).toBe(404);
      expect(await unknown.json()).toEqual({
        object: 'error',
        message: 'The model `x` does not exist.',
        type: 'NotFoundError',
        param: null,
        code: 404,
      });
      const bad = await post('/v1/completions', '{"model": ');
      expect(bad.status).toBe(400);
      expect(await bad.json()).toMatchObject({
        object: 'error',
        type: 'BadRequestError',
        param: null,
        code: 400,
      });
      const zero = await post('/v1/completions', { model: 'mock-model', prompt: 'x', max_tokens: 0 });
      expect(zero.status).toBe(400);
    });

    it('health, models, utility endpoints', async () => {
      expect((await fetch(`${mock.url}/health`)).status).toBe(200);
      mock.setHealthy(false);
      expect((await fetch(`${mock.url}/health`)).status).toBe(503);
      mock.setHealthy(true);
      expect((await fetch(`${mock.url}/health`)).status).toBe(200);

      const models = (await (await fetch(`${mock.url}/v1/models`)).json()) as {
        object: string;
        data: { id: string; object: string; created: number; owned_by: string }[];
      };
      expect(models.object).toBe('list');
      expect(models.data.map((m) => m.id)).toEqual(['mock-model', 'other-model']);
      expect(models.data[0]).toMatchObject({ object: 'model', owned_by: 'sluice-mock' });
      expect(typeof models.data[0]!.created).toBe('number');

      expect((await post('/flush_cache', '')).status).toBe(200);
      expect((await post('/reset_prefix_cache', '')).status).toBe(200);
      const sleeping = async () => (await fetch(`${mock.url}/is_sleeping`)).json();
      expect(await sleeping()).toEqual({ is_sleeping: false });
      expect((await post('/sleep', '')).status).toBe(200);
      expect(await sleeping()).toEqual({ is_sleeping: true });
      expect((await post('/wake_up', '')).status).toBe(200);
      expect(await sleeping()).toEqual({ is_sleeping: false });
    });

    it('records request ids, ranks and bodies, also over GET /mock/stats', async () => {
      await withMock({ dpSize: 2 }, async (m) => {
        const send = (headers: Record<string, string>) =>
          fetch(`${m.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...headers },
            body: JSON.stringify(chat({ max_tokens: 1 })),
          });
        expect((await send({ 'x-request-id': 'a', 'x-data-parallel-rank': '1' })).status).toBe(200);
        expect((await send({ 'x-request-id': 'b' })).status).toBe(200);
        expect((await send({ 'x-request-id': 'c', 'x-data-parallel-rank': '2' })).status).toBe(400);
        const stats = (await (await fetch(`${m.url}/mock/stats`)).json()) as typeof m.stats;
        expect(stats).toMatchObject({ requests: 3, inflight: 0, aborted: 0, completed: 2 });
        expect(stats.requestIds).toEqual(['a', 'b', 'c']);
        expect(stats.ranks).toEqual([1, null, 2]);
        expect(stats.lastBodies).toHaveLength(3);
        expect(stats.lastBodies[0]).toMatchObject({ model: 'mock-model', max_tokens: 1 });
        expect(m.stats.requestIds).toEqual(stats.requestIds);
      });
    });

    it('a worker-wide fault applies unless the request names one; POST /mock/fault sets it', async () => {
      await withMock({ fault: 'http_503' }, async (m) => {
        const send = (headers: Record<string, string> = {}) =>
          fetch(`${m.url}/v1/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...headers },
            body: JSON.stringify({ model: 'mock-model', prompt: 'x', max_tokens: 1 }),
          });
        expect((await send()).status).toBe(503);
        expect((await send({ 'x-mock-fault': '' })).status).toBe(200);
        m.setFault(undefined);
        expect((await send()).status).toBe(200);
        const set = await fetch(`${m.url}/mock/fault`, {
          method: 'POST',
          body: JSON.stringify({ fault: 'http_500' }),
        });
        expect(set.status).toBe(200);
        expect((await send()).status).toBe(500);
        const invalid = await fetch(`${m.url}/mock/fault`, { method: 'POST', body: '{"fault":"bogus"}' });
        expect(invalid.status).toBe(400);
        expect((await send()).status).toBe(500);
      });
    });

    it('paces tokens at tokensPerSecond, each choice at that rate', async () => {
      await withMock({ tokensPerSecond: 100 }, async (m) => {
        const timed = async (n: number) => {
          const started = performance.now();
          const res = await fetch(`${m.url}/v1/chat/completions`, {
            method: 'POST',
            body: JSON.stringify(chat({ stream: true, max_tokens: 10, n })),
          });
          const chunks = chunksOf((await readBody(res)).text);
          for (let c = 0; c < n; c++) {
            const mine = chunks.map((k) => ({ ...k, choices: k.choices.filter((ch) => ch.index === c) }));
            expect(streamedText(mine)).toBe(sequence(10));
          }
          expect(tokenChunks(chunks)).toHaveLength(10 * n);
          return {
            ms: performance.now() - started,
            order: tokenChunks(chunks).map((k) => k.choices[0]!.index),
          };
        };
        await timed(1); // warm-up: the first request of a process pays for JIT and the connection
        const one = await timed(1);
        expect(one.ms).toBeGreaterThanOrEqual(95); // 10 tokens take 10 intervals of 10 ms
        // Generous (a loaded machine only makes it slower): a pace 20 times too slow still fails.
        expect(one.ms).toBeLessThan(2_000);
        // Two choices advance together, one token each per interval: their token chunks
        // alternate (one of each per step), rather than one choice's ten after the other's.
        const two = await timed(2);
        expect(two.ms).toBeGreaterThanOrEqual(95);
        expect(two.order).toEqual(Array.from({ length: 20 }, (_, i) => i % 2));
      });
    });

    it('eventsPerWrite gathers events into fewer writes: the same events, faults still at N', async () => {
      await withMock({ eventsPerWrite: 4 }, async (m) => {
        const send = (headers: Record<string, string> = {}) =>
          fetch(`${m.url}/v1/chat/completions`, {
            method: 'POST',
            headers,
            body: JSON.stringify(
              chat({ stream: true, max_tokens: 7, stream_options: { include_usage: true } }),
            ),
          }).then(readBody);
        const { text } = await send();
        const chunks = chunksOf(text);
        expect(chunks).toHaveLength(10); // role, 7 tokens, finish, usage
        expect(streamedText(chunks)).toBe(sequence(7));
        expect(dataOf(text).at(-1)).toBe('[DONE]');
        const cut = await send({ 'x-mock-fault': 'reset_after:2' });
        expect(cut.error).toBeInstanceOf(TypeError);
        expect(streamedText(chunksOf(cut.text))).toBe(sequence(2));
        const stalled = new AbortController();
        const res = await fetch(`${m.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'x-mock-fault': 'stall_after:3' },
          body: JSON.stringify(chat({ stream: true, max_tokens: 7 })),
          signal: stalled.signal,
        });
        setTimeout(() => stalled.abort(), 100);
        expect(streamedText(chunksOf((await readBody(res)).text))).toBe(sequence(3));
      });
      await expect(createMockWorker({ eventsPerWrite: 0 })).rejects.toThrow(/eventsPerWrite/);
    });

    it('a client that goes away mid-stream is counted aborted, and generation stops', async () => {
      await withMock({ tokensPerSecond: 200 }, async (m) => {
        const controller = new AbortController();
        const res = await fetch(`${m.url}/v1/chat/completions`, {
          method: 'POST',
          body: JSON.stringify(chat({ stream: true, max_tokens: 1000 })),
          signal: controller.signal,
        });
        const reader = res.body!.getReader();
        await reader.read();
        expect(m.stats.inflight).toBe(1);
        controller.abort();
        await eventually(() => m.stats.aborted === 1 && m.stats.inflight === 0);
        expect(m.stats.completed).toBe(0);
      });
    });

    it('close() destroys open streams at once, like a killed process', async () => {
      const m = await createMockWorker({ tokensPerSecond: 50 });
      const res = await fetch(`${m.url}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify(chat({ stream: true, max_tokens: 1000 })),
      });
      const reading = readBody(res);
      const started = performance.now();
      await m.close();
      // At once: the stream had 20 s to go; generous for a loaded machine.
      expect(performance.now() - started).toBeLessThan(2_000);
      expect((await reading).error).toBeInstanceOf(Error);
    });
  });

  describe('faults, as the wire shows them', () => {
    it('http_500, http_503, http_429 answer an error before any stream', async () => {
      for (const [fault, type] of [
        ['http_500', 'InternalServerError'],
        ['http_503', 'ServiceUnavailableError'],
        ['http_429', 'RateLimitError'],
      ] as const) {
        const { status, headers, text } = await faulty(fault);
        const code = Number(fault.slice(5));
        expect(status).toBe(code);
        expect(headers.get('content-type')).toBe('application/json');
        expect(JSON.parse(text)).toMatchObject({ object: 'error', type, param: null, code });
        expect(headers.get('retry-after')).toBe(fault === 'http_429' ? '1' : null);
      }
    });

    it('reset_after:N cuts the connection after N token chunks: the body read throws', async () => {
      const { status, text, error } = await faulty('reset_after:2');
      expect(status).toBe(200);
      expect(error).toBeInstanceOf(TypeError);
      expect(streamedText(chunksOf(text))).toBe(sequence(2));
      expect(text).not.toContain('finish_reason":"');
      expect(text).not.toContain('[DONE]');
    });

    it('a fault past the end of the stream fires after the last token, before the finish', async () => {
      const { text, error } = await faulty('reset_after:100', { max_tokens: 3 });
      expect(error).toBeInstanceOf(TypeError);
      expect(streamedText(chunksOf(text))).toBe(sequence(3));
      expect(text).not.toContain('"finish_reason":"length"');
    });

    it('drop_after cuts non-streaming answers half-way (and streams like reset_after)', async () => {
      const res = await post('/v1/chat/completions', chat({ max_tokens: 4 }), {
        'x-mock-fault': 'drop_after:0',
      });
      expect(res.status).toBe(200);
      const { text, error } = await readBody(res);
      expect(error).toBeInstanceOf(TypeError);
      expect(text.startsWith('{"id":"chatcmpl-')).toBe(true);
      expect(() => JSON.parse(text)).toThrow();
      const streamed = await faulty('drop_after:1');
      expect(streamed.error).toBeInstanceOf(TypeError);
      expect(streamed.text).toContain('"content":" the"');
    });

    it('reset_after leaves non-streaming answers alone', async () => {
      const res = await post('/v1/chat/completions', chat({ max_tokens: 2 }), {
        'x-mock-fault': 'reset_after:0',
      });
      expect(((await res.json()) as OpenAI.Chat.ChatCompletion).choices[0]!.message.content).toBe(
        sequence(2),
      );
    });

    it('error_frame_after:N sends vLLM’s integer-code error frame, then [DONE]', async () => {
      const { text, error } = await faulty('error_frame_after:2');
      expect(error).toBeUndefined();
      const data = dataOf(text);
      expect(data.at(-1)).toBe('[DONE]');
      expect(JSON.parse(data.at(-2)!)).toEqual({
        error: {
          object: 'error',
          message: expect.any(String),
          type: 'InternalServerError',
          param: null,
          code: 500,
        },
      });
      expect(tokenChunks(chunksOf(text.slice(0, text.indexOf('{"error"') - 6)))).toHaveLength(2);
      expect(text).not.toContain('finish_reason":"');
    });

    it('error_frame_str_after:N sends the string-code frame, then [DONE]', async () => {
      const { text } = await faulty('error_frame_str_after:1', {}, '/v1/completions');
      const data = dataOf(text);
      expect(data.at(-1)).toBe('[DONE]');
      expect(JSON.parse(data.at(-2)!)).toEqual({
        error: { message: expect.any(String), type: 'server_error', code: 'internal_error' },
      });
      expect(data.filter((d) => d.includes('"text":" the"'))).toHaveLength(1);
    });

    it('event_error_after:N sends an SSE error event and ends, without [DONE]', async () => {
      const { text, error } = await faulty('event_error_after:3');
      expect(error).toBeUndefined();
      const all = events(text);
      expect(all.at(-1)).toEqual({ event: 'error', data: expect.stringContaining('"message"') });
      expect(JSON.parse(all.at(-1)!.data)).toEqual({ message: expect.any(String) });
      expect(text).not.toContain('[DONE]');
      expect(all.filter((e) => e.data.includes('"content":" '))).toHaveLength(3);
    });

    it('stall_after:N goes silent with the connection open, until the client aborts', async () => {
      await withMock({}, async (m) => {
        const controller = new AbortController();
        const timer = setTimeout(() => controller.abort(), 300);
        const started = performance.now();
        const res = await fetch(`${m.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'x-mock-fault': 'stall_after:2' },
          body: JSON.stringify(chat({ stream: true, max_tokens: 6 })),
          signal: controller.signal,
        });
        const { text, error } = await readBody(res);
        clearTimeout(timer);
        expect((error as Error).name).toBe('AbortError');
        expect(performance.now() - started).toBeGreaterThanOrEqual(290);
        expect(streamedText(chunksOf(text))).toBe(sequence(2));
        await eventually(() => m.stats.aborted === 1);
        expect(m.stats.inflight).toBe(0);
      });
    });

    it('stall_after never answers a non-streaming request', async () => {
      await withMock({}, async (m) => {
        const controller = new AbortController();
        setTimeout(() => controller.abort(), 150);
        const answer = fetch(`${m.url}/v1/completions`, {
          method: 'POST',
          headers: { 'x-mock-fault': 'stall_after:0' },
          body: JSON.stringify({ model: 'mock-model', prompt: 'x' }),
          signal: controller.signal,
        });
        await expect(answer).rejects.toThrow(/abort/i);
        await eventually(() => m.stats.aborted === 1 && m.stats.inflight === 0);
      });
    });

    it('no_finish ends with [DONE] but no chunk has a finish_reason', async () => {
      const { text } = await faulty('no_finish', { stream_options: { include_usage: true } });
      expect(dataOf(text).at(-1)).toBe('[DONE]');
      const chunks = chunksOf(text);
      expect(streamedText(chunks)).toBe(sequence(6));
      expect(chunks.every((c) => c.choices.every((ch) => ch.finish_reason === null))).toBe(true);
      expect(chunks.at(-1)!.usage).toBeDefined();
    });

    it('no_done sends the finish_reason, then ends without [DONE]', async () => {
      const { text, error } = await faulty('no_done');
      expect(error).toBeUndefined();
      expect(text).not.toContain('[DONE]');
      expect(chunksOf(text).at(-1)!.choices[0]!.finish_reason).toBe('length');
    });

    it('eof_after:N ends the response cleanly after N chunks: no finish_reason, no [DONE]', async () => {
      const { text, error } = await faulty('eof_after:4');
      expect(error).toBeUndefined();
      expect(text).not.toContain('[DONE]');
      const chunks = chunksOf(text);
      expect(streamedText(chunks)).toBe(sequence(4));
      expect(chunks.every((c) => c.choices.every((ch) => ch.finish_reason === null))).toBe(true);
    });

    it('malformed_after:N sends a broken frame, then the stream goes on normally', async () => {
      const { text } = await faulty('malformed_after:2');
      const data = dataOf(text);
      const broken = data.indexOf('{"id":"x","choices":[{"delta":{"content":"oops"');
      expect(broken).toBe(3); // role, 2 tokens, then the broken frame
      expect(() => JSON.parse(data[broken]!)).toThrow();
      const rest = [...data.slice(0, broken), ...data.slice(broken + 1)].filter((d) => d !== '[DONE]');
      const chunks = rest.map((d) => JSON.parse(d) as Chunk);
      expect(streamedText(chunks)).toBe(sequence(6));
      expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('length');
      expect(data.at(-1)).toBe('[DONE]');
    });

    it('N counts token chunks after the role chunk: :0 fails before the first token', async () => {
      const { text } = await faulty('eof_after:0');
      const chunks = chunksOf(text);
      expect(chunks).toHaveLength(1);
      expect(chunks[0]!.choices[0]!.delta).toEqual({ role: 'assistant', content: '' });
    });

    it('delay_headers:MS holds the response headers', async () => {
      const started = performance.now();
      const res = await post('/v1/chat/completions', chat({ stream: true, max_tokens: 1 }), {
        'x-mock-fault': 'delay_headers:150',
      });
      expect(performance.now() - started).toBeGreaterThanOrEqual(140);
      expect(dataOf((await readBody(res)).text).at(-1)).toBe('[DONE]');
    });

    it('delay_first:MS sends the headers at once and the first event after MS', async () => {
      const started = performance.now();
      const res = await post('/v1/chat/completions', chat({ stream: true, max_tokens: 1 }), {
        'x-mock-fault': 'delay_first:1500',
      });
      const headersAt = performance.now();
      const reader = res.body!.getReader();
      const first = await reader.read();
      const firstAt = performance.now();
      expect(firstAt - started).toBeGreaterThanOrEqual(1490);
      // The headers came long before the first event (a loaded machine delays both alike).
      expect(firstAt - headersAt).toBeGreaterThanOrEqual(750);
      expect(new TextDecoder().decode(first.value)).toContain('"role":"assistant"');
      await reader.cancel();
    });

    it('faults combine: delay_first, malformed and a reset', async () => {
      const { text, error } = await faulty('delay_first:20,malformed_after:1,reset_after:3');
      expect(error).toBeInstanceOf(TypeError);
      expect(text).toContain('"oops"\n\n');
      expect(text.split('"content":" ').length - 1).toBe(3);
    });
  });
});
