import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { ChatCompletionChunk } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLlamaWorker, type LlamaWorker, type LlamaWorkerStats } from '../src/engine/llama-worker.js';
import { writeTinyModel } from '../src/engine/tiny-model.js';

/** The llama.cpp worker on the tiny model, driven by the `openai` SDK as a client would. */

const MODEL = 'tiny';
const SLOTS = 2;

async function eventually(check: () => boolean | Promise<boolean>, ms = 3_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('llama.cpp worker on the tiny model', () => {
  let dir: string;
  let worker: LlamaWorker;
  let client: OpenAI;

  const remoteStats = async (): Promise<LlamaWorkerStats> =>
    (await (await fetch(`${worker.url}/worker/stats`)).json()) as LlamaWorkerStats;
  const chat = (content: string) => ({ model: MODEL, messages: [{ role: 'user' as const, content }] });
  const completionText = async (prompt: string, extra: Record<string, unknown>) => {
    const r = await client.completions.create({ model: MODEL, prompt, ...extra, stream: false });
    return r.choices[0]!.text;
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-engine-'));
    const modelPath = join(dir, 'tiny.gguf');
    await writeTinyModel(modelPath, { seed: 1 });
    worker = await createLlamaWorker({ modelPath, slots: SLOTS, modelName: MODEL });
    client = new OpenAI({ baseURL: `${worker.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  afterAll(async () => {
    await worker?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('is healthy and lists its model', async () => {
    expect((await fetch(`${worker.url}/health`)).status).toBe(200);
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
  });

  it('answers a chat completion, stopping at max_tokens with usage', async () => {
    const r = await client.chat.completions.create({ ...chat('Hello'), max_tokens: 8, seed: 1 });
    expect(r.object).toBe('chat.completion');
    expect(r.choices).toHaveLength(1);
    expect(r.choices[0]!.message.role).toBe('assistant');
    expect(r.choices[0]!.message.content).toMatch(/\S/);
    expect(r.choices[0]!.finish_reason).toBe('length');
    // "<|im_start|>" "u" "s" "er" "\n" "Hello" "<|im_end|>" "\n" "<|im_start|>", 10 for "assistant\n"
    expect(r.usage).toEqual({ prompt_tokens: 19, completion_tokens: 8, total_tokens: 27 });
  });

  it('streams a chat completion: role first, one chunk per token, finish_reason, usage, [DONE]', async () => {
    const stream = await client.chat.completions.create({
      ...chat('Hello'),
      max_tokens: 12,
      seed: 1,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    const content = chunks.filter((c) => c.choices[0]?.delta.content);
    expect(content.length).toBeGreaterThan(5);
    const finish = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finish.map((c) => c.choices[0]!.finish_reason)).toEqual(['length']);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({ prompt_tokens: 19, completion_tokens: 12, total_tokens: 31 });
    // The same seed gives the same text streamed or not.
    const text = content.map((c) => c.choices[0]!.delta.content).join('');
    const whole = await client.chat.completions.create({ ...chat('Hello'), max_tokens: 12, seed: 1 });
    expect(whole.choices[0]!.message.content).toBe(text);
  });

  it('answers completions, streaming and not', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: ' the world', max_tokens: 6, seed: 4 });
    expect(r.object).toBe('text_completion');
    expect(r.choices[0]!.finish_reason).toBe('length');
    expect(r.usage).toEqual({ prompt_tokens: 2, completion_tokens: 6, total_tokens: 8 });
    const stream = await client.completions.create({
      model: MODEL,
      prompt: ' the world',
      max_tokens: 6,
      seed: 4,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    const reasons: (string | null)[] = [];
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        text += choice.text;
        if (choice.finish_reason) reasons.push(choice.finish_reason);
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(r.choices[0]!.text);
    expect(reasons).toEqual(['length']);
    expect(usage?.completion_tokens).toBe(6);
  });

  it("tokenizes with the model's own BPE merges and special tokens", async () => {
    const promptTokens = async (prompt: string) =>
      (await client.completions.create({ model: MODEL, prompt, max_tokens: 1 })).usage!.prompt_tokens;
    expect(await promptTokens(' the')).toBe(1);
    expect(await promptTokens('Hello world')).toBe(2);
    expect(await promptTokens('<|im_start|><|im_end|>')).toBe(2);
    expect(await promptTokens('zq')).toBe(2);
  });

  it('ends its chat answers by itself at 20-80 tokens; raw completions and ignore_eos go on', async () => {
    // The tiny model's answer timer (tiny-model.ts), at the default sampling, max_tokens far off.
    const lengths: number[] = [];
    for (let i = 0; i < 8; i++) {
      const r = await client.chat.completions.create({
        ...chat(['Hello', 'Tell me about the world', `q${i}`, 'What is this model?'][i % 4]!),
        max_tokens: 400,
        seed: 100 + i,
      });
      expect(r.choices[0]!.finish_reason).toBe('stop');
      lengths.push(r.usage!.completion_tokens);
    }
    for (const length of lengths) {
      expect(length).toBeGreaterThanOrEqual(20);
      expect(length).toBeLessThanOrEqual(80);
    }
    // Text without <|im_start|> is no chat: it runs to max_tokens, as before.
    const raw = await client.completions.create({ model: MODEL, prompt: 'Tell me', max_tokens: 150 });
    expect(raw.choices[0]!.finish_reason).toBe('length');
    // vLLM's ignore_eos: the end-of-sequence token does not end the answer.
    const ignoring = await client.chat.completions.create({
      ...chat('Tell me'),
      max_tokens: 150,
      ...{ ignore_eos: true },
    });
    expect(ignoring.choices[0]!.finish_reason).toBe('length');
    expect(ignoring.usage?.completion_tokens).toBe(150);
  });

  it('applies the ChatML template, and continues a final assistant message', async () => {
    const sampling = { max_tokens: 10, seed: 9 };
    const opened = await client.chat.completions.create({ ...chat('Hi'), ...sampling });
    const raw = await completionText('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n', sampling);
    expect(opened.choices[0]!.message.content).toBe(raw);

    const continued = await client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello the' },
      ],
      ...sampling,
      // vLLM's extensions, passed through the body.
      ...{ continue_final_message: true, add_generation_prompt: false },
    });
    const rawContinued = await completionText(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello the',
      sampling,
    );
    expect(continued.choices[0]!.message.content).toBe(rawContinued);
  });

  it('honours temperature 0 and top_p: greedy output does not depend on the seed', async () => {
    const greedy = await completionText('Hello', { max_tokens: 10, temperature: 0, seed: 1 });
    expect(await completionText('Hello', { max_tokens: 10, temperature: 0, seed: 2 })).toBe(greedy);
    expect(await completionText('Hello', { max_tokens: 10, temperature: 1, top_p: 1e-6, seed: 3 })).toBe(
      greedy,
    );
    const sampled = await Promise.all(
      [5, 6, 7].map((seed) => completionText('Hello', { max_tokens: 10, seed })),
    );
    expect(new Set(sampled).size).toBeGreaterThan(1);
  });

  it('ends at a stop string, which is left out, with finish_reason stop', async () => {
    const sampling = { max_tokens: 40, seed: 11 };
    const full = await completionText('Hello', sampling);
    // A stop string whose first occurrence is well inside the text.
    let at = 5;
    while (full.indexOf(full.slice(at, at + 2)) !== at) at++;
    const stop = full.slice(at, at + 2);

    const r = await client.completions.create({
      model: MODEL,
      prompt: 'Hello',
      ...sampling,
      stop: [stop, 'never'],
    });
    expect(r.choices[0]!.text).toBe(full.slice(0, at));
    expect(r.choices[0]!.finish_reason).toBe('stop');
    expect(r.usage!.completion_tokens).toBeLessThan(40);

    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Hi' }],
      ...sampling,
      stream: true,
    });
    let chatFull = '';
    for await (const chunk of stream) chatFull += chunk.choices[0]?.delta.content ?? '';
    let chatAt = 3;
    while (chatFull.indexOf(chatFull.slice(chatAt, chatAt + 3)) !== chatAt) chatAt++;
    const chatStop = chatFull.slice(chatAt, chatAt + 3);
    const stopped = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Hi' }],
      ...sampling,
      stop: chatStop,
      stream: true,
    });
    let text = '';
    const reasons: string[] = [];
    for await (const chunk of stopped) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.choices[0]?.finish_reason) reasons.push(chunk.choices[0].finish_reason);
    }
    expect(text).toBe(chatFull.slice(0, chatAt));
    expect(reasons).toEqual(['stop']);
  });

  it('answers errors shaped like vLLM: unknown model 404, bad bodies 400', async () => {
    const notFound = await client.chat.completions
      .create({ ...chat('Hi'), model: 'other' })
      .catch((e: unknown) => e);
    expect(notFound).toBeInstanceOf(OpenAI.NotFoundError);
    expect((notFound as InstanceType<typeof OpenAI.NotFoundError>).status).toBe(404);
    const twoChoices = await client.chat.completions.create({ ...chat('Hi'), n: 2 }).catch((e: unknown) => e);
    expect(twoChoices).toBeInstanceOf(OpenAI.BadRequestError);

    const post = (body: string) =>
      fetch(`${worker.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
    const unknown = await post(JSON.stringify({ ...chat('Hi'), model: 'other' }));
    expect(await unknown.json()).toEqual({
      object: 'error',
      message: 'The model `other` does not exist.',
      type: 'NotFoundError',
      param: null,
      code: 404,
    });
    const invalid = await post('{not json');
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toEqual({
      object: 'error',
      message: 'Invalid JSON body.',
      type: 'BadRequestError',
      param: null,
      code: 400,
    });
    const both = await post(
      JSON.stringify({ ...chat('Hi'), continue_final_message: true, add_generation_prompt: true }),
    );
    expect(both.status).toBe(400);
    const ids = await client.completions.create({ model: MODEL, prompt: [72, 105], max_tokens: 1 });
    expect(ids.usage?.prompt_tokens).toBe(2);
    const badIds = await client.completions
      .create({ model: MODEL, prompt: [72, 100_000], max_tokens: 1 })
      .catch((e: unknown) => e);
    expect(badIds).toBeInstanceOf(OpenAI.BadRequestError);
    const tooLong = await post(JSON.stringify({ ...chat('Hi'), max_tokens: 100_000 }));
    expect(tooLong.status).toBe(400);
    expect(((await tooLong.json()) as { message: string }).message).toMatch(/maximum context length is 2048/);
  });

  it(`runs ${SLOTS} requests at once and queues the next one until a slot frees`, async () => {
    const controllers = Array.from({ length: SLOTS }, () => new AbortController());
    const streams = await Promise.all(
      controllers.map((controller, i) =>
        client.chat.completions.create(
          { ...chat('Go'), max_tokens: 2000 - 20, seed: i, stream: true, ...{ ignore_eos: true } },
          {
            signal: controller.signal,
          },
        ),
      ),
    );
    const iterators = streams.map((s) => s[Symbol.asyncIterator]());
    await Promise.all(iterators.map((it) => it.next()));
    expect((await remoteStats()).inflight).toBe(SLOTS);

    let waitingDone = false;
    const waiting = client.chat.completions.create({ ...chat('Wait'), max_tokens: 3 }).finally(() => {
      waitingDone = true;
    });
    await eventually(async () => (await remoteStats()).queued === 1);
    expect((await remoteStats()).inflight).toBe(SLOTS);
    expect(waitingDone).toBe(false);

    controllers[0]!.abort();
    const answer = await waiting;
    expect(answer.usage?.completion_tokens).toBe(3);
    controllers[1]!.abort();
    await eventually(() => worker.stats.inflight === 0 && worker.stats.queued === 0);
  });

  it('stops generating and frees the slot at once when a client aborts a stream', async () => {
    const before = { ...worker.stats };
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { ...chat('Long'), max_tokens: 1900, stream: true, ...{ ignore_eos: true } },
      {
        signal: controller.signal,
      },
    );
    let chunks = 0;
    const reading = (async () => {
      for await (const _ of stream) if (++chunks === 5) controller.abort();
    })().catch(() => undefined);
    await reading;
    expect(chunks).toBe(5);
    const abortedAt = Date.now();
    await eventually(() => worker.stats.inflight === 0, 5_000);
    // Generous for a loaded machine; that generation really stopped is what `completed` below says.
    expect(Date.now() - abortedAt).toBeLessThan(3_000);
    const after = await remoteStats();
    expect(after.aborted).toBe(before.aborted + 1);
    expect(after.completed).toBe(before.completed);
    expect(after.inflight).toBe(0);
    // The slot works again.
    const next = await client.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 2 });
    expect(next.usage?.completion_tokens).toBe(2);
  });
});
