import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createOpenAI } from '@ai-sdk/openai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { embedMany } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TINY_MODEL_SHAPE } from '../src/engine/tiny-model.js';
import { eventually, perTest, post } from './helpers/gateway.js';
import { LlamaProcess } from './helpers/llama-process.js';

/** Embeddings computed by llama.cpp on the tiny model, through the gateway. */

const cosine = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let dot = 0;
  for (let i = 0; i < a.length; i++) dot += a[i]! * b[i]!;
  return dot;
};
const norm = (v: ArrayLike<number>) => Math.sqrt(cosine(v, v));

describe('`npm start` on a fresh machine: the embedded engine embeds', () => {
  let child: ChildProcess;
  let url: string;

  beforeAll(async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sluice-embed-'));
    child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'serve', '--port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, SLUICE_DATA_DIR: dataDir },
    });
    let output = '';
    child.stderr!.on('data', (c: Buffer) => {
      output += c.toString();
    });
    url = await new Promise<string>((resolve, reject) => {
      child.stdout!.on('data', (c: Buffer) => {
        output += c.toString();
        const match = /"url":"(http:\/\/[^"]+)","workers"/.exec(output);
        if (match) resolve(match[1]!);
      });
      child.once('exit', (code) => reject(new Error(`exited ${code}: ${output}`)));
    });
  }, 90_000);
  afterAll(async () => {
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    await exited;
  });

  it('the openai SDK: real, deterministic, normalized vectors of the tiny model, as floats and as base64', async () => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const texts = ['hello world', 'a rather different sentence'];
    const float = await client.embeddings.create({
      model: 'sluice-tiny',
      input: texts,
      encoding_format: 'float',
    });
    expect(float.model).toBe('sluice-tiny');
    expect(float.data).toHaveLength(2);
    const [a, b] = float.data.map((d) => d.embedding);
    expect(a).toHaveLength(TINY_MODEL_SHAPE.embedding);
    expect(norm(a!)).toBeCloseTo(1, 5);
    expect(a).not.toEqual(b);
    expect(float.usage.prompt_tokens).toBeGreaterThan(2);
    // The SDK's default (base64, decoded by it) gives the same vectors, computed again.
    const decoded = await client.embeddings.create({ model: 'sluice-tiny', input: texts });
    expect(Array.from(decoded.data[0]!.embedding)).toEqual(Array.from(new Float32Array(a!)));
    expect(Array.from(decoded.data[1]!.embedding)).toEqual(Array.from(new Float32Array(b!)));
    // Matryoshka-style: the first dimensions, normalized again.
    const short = await client.embeddings.create({
      model: 'sluice-tiny',
      input: 'hello world',
      dimensions: 16,
      encoding_format: 'float',
    });
    expect(short.data[0]!.embedding).toHaveLength(16);
    expect(norm(short.data[0]!.embedding)).toBeCloseTo(1, 5);
  });

  it("LangChain's OpenAIEmbeddings and the AI SDK's embedMany get the same vectors", async () => {
    const langchain = new OpenAIEmbeddings({
      model: 'sluice-tiny',
      apiKey: 'x',
      configuration: { baseURL: `${url}/v1` },
      maxRetries: 0,
    });
    const documents = await langchain.embedDocuments(['hello world', 'goodbye']);
    const provider = createOpenAI({ baseURL: `${url}/v1`, apiKey: 'x' });
    const { embeddings } = await embedMany({
      model: provider.embedding('sluice-tiny'),
      values: ['hello world', 'goodbye'],
      maxRetries: 0,
    });
    expect(documents).toHaveLength(2);
    expect(documents[0]).toHaveLength(TINY_MODEL_SHAPE.embedding);
    embeddings.forEach((vector, i) => {
      expect(cosine(vector, documents[i]!)).toBeCloseTo(1, 5);
    });
    expect(cosine(documents[0]!, documents[1]!)).toBeLessThan(0.999);
  });

  it('the model says what it serves: chat and embeddings, not rerank; the tokenizer answers', async () => {
    const rerank = await post(`${url}/v1/rerank`, { model: 'sluice-tiny', query: 'q', documents: ['d'] });
    expect(rerank.status).toBe(400);
    expect((rerank.json() as { error: { code: string } }).error.code).toBe('wrong_model_kind');
    const chat = await post(`${url}/v1/chat/completions`, {
      model: 'sluice-tiny',
      max_tokens: 3,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(chat.status).toBe(200);
    const tokens = await post(`${url}/tokenize`, { model: 'sluice-tiny', prompt: 'hello' });
    expect(tokens.status).toBe(200);
    const { count, tokens: ids } = tokens.json() as { count: number; tokens: number[] };
    expect(count).toBe(ids.length);
    const text = await post(`${url}/detokenize`, { model: 'sluice-tiny', tokens: ids });
    expect(text.json()).toEqual({ prompt: 'hello' });
    const tooLong = await post(`${url}/v1/embeddings`, { model: 'sluice-tiny', input: 'word '.repeat(3000) });
    expect(tooLong.status).toBe(400);
    expect((tooLong.json() as { error: { message: string } }).error.message).toContain(
      'maximum context length',
    );
  });
});

describe('an engine that dies on an embedding request', () => {
  const fx = perTest();
  const engines: LlamaProcess[] = [];
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.kill()));
  });

  it('is failed over: the request is retried on the other worker, the client sees one answer, its key charged once', {
    timeout: 90_000,
  }, async () => {
    const model = await LlamaProcess.tinyModel();
    const [first, second] = [new LlamaProcess(model), new LlamaProcess(model)];
    engines.push(first, second);
    await Promise.all([first.start(), second.start()]);
    const gateway = await fx.gateway({
      routing: { policy: 'round_robin' },
      // Health checks far apart: the frozen engine is not taken out before the request reaches it.
      health: { intervalMs: 60_000, timeoutMs: 5_000 },
      workers: [
        { url: first.url, id: 'first' },
        { url: second.url, id: 'second' },
      ],
    });
    const key = (await (await post(`${gateway.url}/admin/keys`, {})).json()) as { id: string; key: string };
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: key.key, maxRetries: 0 });
    const texts = ['the request that outlives its engine', 'and a second input'];
    const served = await client.embeddings
      .create({ model: 'tiny', input: texts, encoding_format: 'float' })
      .withResponse();
    const reference = served.data;
    // Round robin: the next request goes to the engine that did not answer this one. It is
    // frozen, then killed once the request is on it.
    const [victim, survivor] =
      served.response.headers.get('x-sluice-worker') === 'first' ? ['second', 'first'] : ['first', 'second'];
    const dying = victim === 'first' ? first : second;
    dying.signal('SIGSTOP');
    const answer = client.embeddings
      .create(
        { model: 'tiny', input: texts, encoding_format: 'float' },
        { headers: { 'x-request-id': 'dies-1' } },
      )
      .withResponse();
    const frozen = gateway.context.registry.get(victim)!;
    await eventually(() => frozen.limiter.inFlight === 1, 10_000);
    await dying.kill();
    const { data, response } = await answer;
    expect(response.headers.get('x-sluice-worker')).toBe(survivor);
    expect(data.data.map((d) => d.embedding)).toEqual(reference.data.map((d) => d.embedding));
    const stats = await (victim === 'first' ? second : first).stats();
    expect(stats.completed).toBe(2);
    const usage = (await (await fetch(`${gateway.url}/admin/keys/${key.id}/usage`)).json()) as Record<
      string,
      number
    >;
    expect(usage).toMatchObject({ requests: 2, prompt_tokens: 2 * reference.usage.prompt_tokens });
  });
});
