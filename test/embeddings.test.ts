import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createOpenAI } from '@ai-sdk/openai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { embedMany } from 'ai';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { loadConfig, parseConfig } from '../src/config/load.js';
import type { SluiceConfigInput } from '../src/config/schema.js';
import { MOCK_DIMENSIONS, mockRelevance, mockVector } from '../src/mock/pooling-endpoints.js';
import { chatBody, metric, metricOrZero, perTest, post } from './helpers/gateway.js';

/**
 * `/v1/embeddings`, the rerank paths, `/v1/score` and the tokenizer through the gateway, in front
 * of mock workers (their vectors are a hash of the text: what each input's vector must be is
 * known), driven by the clients a retrieval pipeline uses.
 */

const MODEL = 'mock-model';
/** The vector the mock answers for `text`, as the float32 an SDK decodes from base64. */
const expected = (text: string, dimensions = MOCK_DIMENSIONS) =>
  Array.from(new Float32Array(mockVector(text, dimensions)));
/** The bound on `dimensions` (src/pooling/request-schemas.ts, docs/SECURITY.md). */
const MAX_EMBEDDING_DIMENSIONS = 65_536;
const TEXTS = ['the first passage', 'a second one, longer than the first', 'third'];

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

describe('embeddings, rerank, score and tokenize through the gateway', () => {
  const fx = perTest();

  async function setup(count: number, input: SluiceConfigInput = {}, fault?: string) {
    const workers = await fx.mocks(count, { tokenizer: true });
    if (fault) workers[0]!.setFault(fault);
    const gateway = await fx.gateway({
      routing: { policy: 'round_robin', ...input.routing },
      ...input,
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
    });
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 });
    return { gateway, workers, client };
  }

  it('the openai SDK: embeddings.create as float, as the base64 it asks for by default, and as base64 asked for', async () => {
    const { client, workers } = await setup(1);
    const float = await client.embeddings.create({ model: MODEL, input: TEXTS, encoding_format: 'float' });
    expect(float.object).toBe('list');
    expect(float.model).toBe(MODEL);
    expect(float.data.map((d) => d.index)).toEqual([0, 1, 2]);
    float.data.forEach((d, i) => {
      expect(d.embedding).toEqual(mockVector(TEXTS[i]!, MOCK_DIMENSIONS));
    });
    // One token a word in the mock: what the engine counted is what the client is told.
    expect(float.usage).toMatchObject({ prompt_tokens: 3 + 7 + 1, total_tokens: 11 });
    // The SDK's default: it asks for base64 and decodes it to floats.
    const decoded = await client.embeddings.create({ model: MODEL, input: TEXTS });
    expect((workers[0]!.stats.lastBodies.at(-1) as { encoding_format: string }).encoding_format).toBe(
      'base64',
    );
    decoded.data.forEach((d, i) => {
      expect(Array.from(d.embedding)).toEqual(expected(TEXTS[i]!));
    });
    // Asked for by the client: the base64 text as the engine wrote it, and `dimensions` passed on.
    const raw = await client.embeddings.create({
      model: MODEL,
      input: 'one input',
      encoding_format: 'base64',
      dimensions: 8,
      user: 'user-1',
    });
    const text = raw.data[0]!.embedding as unknown as string;
    expect(typeof text).toBe('string');
    const bytes = Buffer.from(text, 'base64');
    expect(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4))).toEqual(
      expected('one input', 8),
    );
    expect(workers[0]!.stats.lastBodies.at(-1)).toMatchObject({ dimensions: 8, user: 'user-1' });
  });

  it('token-id input: one list of ids, and a batch of lists', async () => {
    const { client } = await setup(1);
    const one = await client.embeddings.create({ model: MODEL, input: [1, 2, 3], encoding_format: 'float' });
    expect(one.data).toHaveLength(1);
    expect(one.data[0]!.embedding).toEqual(mockVector('1,2,3', MOCK_DIMENSIONS));
    expect(one.usage.prompt_tokens).toBe(3);
    const many = await client.embeddings.create({
      model: MODEL,
      input: [[1, 2], [3]],
      encoding_format: 'float',
    });
    expect(many.data.map((d) => d.embedding)).toEqual([
      mockVector('1,2', MOCK_DIMENSIONS),
      mockVector('3', MOCK_DIMENSIONS),
    ]);
  });

  it("LangChain's OpenAIEmbeddings: embedDocuments in order and embedQuery", async () => {
    const { gateway } = await setup(1);
    const embeddings = new OpenAIEmbeddings({
      model: MODEL,
      apiKey: 'x',
      configuration: { baseURL: `${gateway.url}/v1` },
      maxRetries: 0,
    });
    const documents = await embeddings.embedDocuments(TEXTS);
    expect(documents).toEqual(TEXTS.map((t) => expected(t)));
    expect(await embeddings.embedQuery('what is the first passage?')).toEqual(
      expected('what is the first passage?'),
    );
  });

  it("the Vercel AI SDK's embedMany: every value's vector, in order, and the usage", async () => {
    const { gateway } = await setup(1);
    const provider = createOpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x' });
    const { embeddings, usage } = await embedMany({
      model: provider.embedding(MODEL),
      values: TEXTS,
      maxRetries: 0,
    });
    expect(embeddings).toEqual(TEXTS.map((t) => mockVector(t, MOCK_DIMENSIONS)));
    expect(usage.tokens).toBe(11);
  });

  it.each([
    ['http_500', 'an engine error'],
    ['http_503', 'an engine that is overloaded'],
    ['drop_after:0', 'an engine that dies halfway through its answer'],
  ])('%s (%s) on one worker: retried on the other, the client sees one answer', async (fault) => {
    const { client, workers, gateway } = await setup(2, {}, fault);
    const res = await client.embeddings
      .create(
        { model: MODEL, input: TEXTS, encoding_format: 'float' },
        { headers: { 'x-request-id': 'emb-fo' } },
      )
      .withResponse();
    expect(res.data.data.map((d) => d.embedding)).toEqual(TEXTS.map((t) => mockVector(t, MOCK_DIMENSIONS)));
    expect(res.response.headers.get('x-sluice-worker')).toBe('w1');
    // The faulty worker had the first attempt, the good one the retry under its own id.
    expect(workers[0]!.stats.requestIds).toEqual(['emb-fo']);
    expect(workers[1]!.stats.requestIds).toEqual(['emb-fo-retry1']);
    expect(await metric(gateway.url, 'sluice_upstream_retries_total', { model: MODEL })).toBe(1);
    expect(
      await metric(gateway.url, 'sluice_requests_total', {
        route: 'embeddings',
        model: MODEL,
        status: '200',
      }),
    ).toBe(1);
  });

  it('an engine that refuses the request (400) is not retried: its error reaches the client in OpenAI shape', async () => {
    const { gateway, workers } = await setup(2, {}, 'http_400');
    const res = await post(`${gateway.url}/v1/embeddings`, { model: MODEL, input: 'x' });
    expect(res.status).toBe(400);
    expect((res.json() as ErrorBody).error).toMatchObject({
      code: 'upstream_http_error',
      type: 'invalid_request_error',
    });
    expect(workers[0]!.stats.requests + workers[1]!.stats.requests).toBe(1);
  });

  it('an engine that answers fewer vectors than inputs is not believed: a 502 upstream_bad_response', async () => {
    // An engine that answers one vector whatever it is asked.
    const liar = createServer((req, res) => {
      if (req.url === '/health') return res.writeHead(200).end();
      if (req.url === '/v1/models')
        return res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ object: 'list', data: [{ id: MODEL }] }));
      req.resume();
      req.on('end', () => {
        const data = [{ index: 0, object: 'embedding', embedding: [1, 0] }];
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            object: 'list',
            model: MODEL,
            data,
            usage: { prompt_tokens: 1, total_tokens: 1 },
          }),
        );
      });
    });
    await new Promise<void>((resolve) => liar.listen(0, '127.0.0.1', resolve));
    try {
      const liarUrl = `http://127.0.0.1:${(liar.address() as AddressInfo).port}`;
      const alone = await fx.gateway({ workers: [{ url: liarUrl, id: 'liar' }] });
      const refused = await post(`${alone.url}/v1/embeddings`, { model: MODEL, input: ['a', 'b'] });
      expect(refused.status).toBe(502);
      expect((refused.json() as ErrorBody).error).toMatchObject({ code: 'upstream_bad_response' });
      expect((refused.json() as ErrorBody).error.message).toContain('1 embeddings for 2 inputs');
    } finally {
      await new Promise((resolve) => liar.close(resolve));
    }
  });

  it('a key: its model list, its usage charged once with the input tokens (a failover included), its budget', async () => {
    const { gateway, workers } = await setup(2, {}, 'http_500');
    const admin = (path: string, body?: unknown) =>
      fetch(`${gateway.url}/admin${path}`, {
        method: body === undefined ? 'GET' : 'POST',
        headers: { 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      }).then((r) => r.json() as Promise<Record<string, unknown>>);
    const key = (await admin('/keys', { budget_tokens: 12 })) as { id: string; key: string };
    const other = (await admin('/keys', { models: ['another-model'] })) as { key: string };
    const auth = (k: string) => ({ authorization: `Bearer ${k}` });

    const refused = await post(`${gateway.url}/v1/embeddings`, { model: MODEL, input: 'x' }, auth(other.key));
    expect(refused.status).toBe(403);
    expect((refused.json() as ErrorBody).error.code).toBe('model_not_allowed');

    const ok = await post(`${gateway.url}/v1/embeddings`, { model: MODEL, input: TEXTS }, auth(key.key));
    expect(ok.status).toBe(200);
    expect(workers[0]!.stats.requests + workers[1]!.stats.requests).toBe(2);
    const usage = await admin(`/keys/${key.id}/usage`);
    expect(usage).toMatchObject({ requests: 1, prompt_tokens: 11, completion_tokens: 0, budget_left: 1 });

    // Rerank is charged its engine's total_tokens.
    const rerank = await post(
      `${gateway.url}/v1/rerank`,
      { model: MODEL, query: 'q', documents: ['d'] },
      auth(key.key),
    );
    expect(rerank.status).toBe(200);
    expect(await admin(`/keys/${key.id}/usage`)).toMatchObject({
      requests: 2,
      prompt_tokens: 13,
      budget_left: 0,
    });
    const exhausted = await post(`${gateway.url}/v1/embeddings`, { model: MODEL, input: 'x' }, auth(key.key));
    expect(exhausted.status).toBe(429);
    expect((exhausted.json() as ErrorBody).error.code).toBe('insufficient_quota');
  });

  it('bad input: each a 400 in OpenAI shape naming its field, the worker never asked', async () => {
    const { gateway, workers } = await setup(1, { limits: { maxBatchInputs: 3 } });
    const cases: [unknown, string, string | null][] = [
      [{ model: MODEL, input: '' }, 'empty_input', 'input'],
      [{ model: MODEL, input: [] }, 'empty_input', 'input'],
      [{ model: MODEL, input: ['a', ''] }, 'empty_input', 'input[1]'],
      [{ model: MODEL, input: [[1], []] }, 'empty_input', 'input[1]'],
      [{ model: MODEL, input: ['a', 'b', 'c', 'd'] }, 'too_many_inputs', 'input'],
      [{ model: MODEL, input: 42 }, 'invalid_value', 'input'],
      [{ model: MODEL, input: [1, 'a'] }, 'invalid_value', 'input'],
      [{ model: MODEL, input: [-1] }, 'invalid_value', 'input[0]'],
      [{ model: MODEL, input: 'a', encoding_format: 'hex' }, 'invalid_value', 'encoding_format'],
      [{ model: MODEL, input: 'a', dimensions: 0 }, 'invalid_value', 'dimensions'],
      [{ model: MODEL }, 'missing_required_parameter', 'input'],
      [{ input: 'a' }, 'missing_required_parameter', 'model'],
      [{ model: MODEL, query: 'q', documents: [] }, 'empty_input', 'documents'],
    ];
    for (const [body, code, param] of cases) {
      const path = (body as { query?: unknown }).query === undefined ? '/v1/embeddings' : '/v1/rerank';
      const res = await post(`${gateway.url}${path}`, body);
      expect({ body, status: res.status }).toEqual({ body, status: 400 });
      const { error } = res.json() as ErrorBody;
      expect({ body, code: error.code, param: error.param, type: error.type }).toEqual({
        body,
        code,
        param,
        type: 'invalid_request_error',
      });
      expect(error.message.length).toBeGreaterThan(10);
    }
    const unknown = await post(`${gateway.url}/v1/embeddings`, { model: 'nope', input: 'a' });
    expect(unknown.status).toBe(404);
    expect((unknown.json() as ErrorBody).error.code).toBe('model_not_found');
    expect(workers[0]!.stats.requests).toBe(0);
  });

  it('dimensions past 65536 (1e9, 65537) is a 400 naming it, the worker never asked; the mock refuses absurd dimensions itself', async () => {
    const { gateway, workers, client } = await setup(1);
    for (const dimensions of [1e9, MAX_EMBEDDING_DIMENSIONS + 1, 2.5, -3, '8']) {
      const res = await post(`${gateway.url}/v1/embeddings`, { model: MODEL, input: 'a', dimensions });
      expect({ dimensions, status: res.status }).toEqual({ dimensions, status: 400 });
      expect((res.json() as ErrorBody).error).toMatchObject({
        type: 'invalid_request_error',
        code: 'invalid_value',
        param: 'dimensions',
      });
    }
    const refused = await client.embeddings
      .create({ model: MODEL, input: 'a', dimensions: 1e9 })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('dimensions');
    expect(workers[0]!.stats.requests).toBe(0);
    // The bound itself is asked for and answered.
    const widest = await client.embeddings.create({
      model: MODEL,
      input: 'a',
      dimensions: MAX_EMBEDDING_DIMENSIONS,
      encoding_format: 'float',
    });
    expect(widest.data[0]!.embedding).toHaveLength(MAX_EMBEDDING_DIMENSIONS);
    // A client reaching the mock worker directly: refused, and the worker lives on.
    const direct = (body: unknown) => post(`${workers[0]!.url}/v1/embeddings`, body);
    const huge = await direct({ model: MODEL, input: 'a', dimensions: 1e9 });
    expect(huge.status).toBe(400);
    expect(JSON.stringify(huge.json())).toContain('dimensions');
    const wide = await direct({
      model: MODEL,
      input: Array(64).fill('a'),
      dimensions: MAX_EMBEDDING_DIMENSIONS,
    });
    expect(wide.status).toBe(400);
    expect((await direct({ model: MODEL, input: 'a', dimensions: 4 })).status).toBe(200);
    // A huge top_n on rerank allocates nothing: the documents, at most, are answered.
    const ranked = await post(`${gateway.url}/v1/rerank`, {
      model: MODEL,
      query: 'q',
      documents: ['a', 'b'],
      top_n: Number.MAX_SAFE_INTEGER,
    });
    expect(ranked.status).toBe(200);
    expect((ranked.json() as { results: unknown[] }).results).toHaveLength(2);
  });

  it("inputs over the model's context: token ids refused by the gateway, a text by the engine, both in OpenAI shape", async () => {
    const workers = await fx.mocks(1, { maxModelLen: 4 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const ids = await post(`${gateway.url}/v1/embeddings`, {
      model: MODEL,
      input: [
        [1, 2],
        [1, 2, 3, 4, 5],
      ],
    });
    expect(ids.status).toBe(400);
    expect((ids.json() as ErrorBody).error).toMatchObject({
      code: 'context_length_exceeded',
      param: 'input[1]',
      type: 'invalid_request_error',
      max_allowed: 4,
    });
    expect(workers[0]!.stats.requests).toBe(0);
    const text = await post(`${gateway.url}/v1/embeddings`, {
      model: MODEL,
      input: 'one two three four five',
    });
    expect(text.status).toBe(400);
    const { error } = text.json() as ErrorBody;
    expect(error.type).toBe('invalid_request_error');
    expect(error.message).toContain('maximum context length is 4 tokens');
    expect(workers[0]!.stats.requests).toBe(1);
  });

  it('a model of one kind refuses requests of another with a 400 wrong_model_kind, before any worker is asked', async () => {
    const workers = await fx.mocks(1, { models: ['embedder', 'chatter', 'reranker'], tokenizer: true });
    const gateway = await fx.gateway({
      workers: [{ url: workers[0]!.url }],
      models: { embedder: { kind: 'embedding' }, chatter: { kind: 'chat' }, reranker: { kind: 'rerank' } },
    });
    const refusals: [string, unknown][] = [
      ['/v1/chat/completions', chatBody({ model: 'embedder' })],
      ['/v1/completions', { model: 'embedder', prompt: 'x' }],
      ['/v1/responses', { model: 'embedder', input: 'x' }],
      ['/v1/embeddings', { model: 'chatter', input: 'x' }],
      ['/v1/embeddings', { model: 'reranker', input: 'x' }],
      ['/v1/rerank', { model: 'embedder', query: 'q', documents: ['d'] }],
      ['/v1/score', { model: 'chatter', text_1: 'a', text_2: 'b' }],
    ];
    for (const [path, body] of refusals) {
      const res = await post(`${gateway.url}${path}`, body);
      expect({ path, status: res.status }).toEqual({ path, status: 400 });
      expect((res.json() as ErrorBody).error).toMatchObject({
        code: 'wrong_model_kind',
        param: 'model',
        type: 'invalid_request_error',
      });
    }
    const messages = await post(`${gateway.url}/v1/messages`, {
      model: 'embedder',
      max_tokens: 5,
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(messages.status).toBe(400);
    expect(messages.text).toContain('wrong_model_kind');
    expect(workers[0]!.stats.requests).toBe(0);
    // What each kind serves, it serves; the tokenizer answers for every kind.
    expect((await post(`${gateway.url}/v1/embeddings`, { model: 'embedder', input: 'x' })).status).toBe(200);
    expect((await post(`${gateway.url}/v1/chat/completions`, chatBody({ model: 'chatter' }))).status).toBe(
      200,
    );
    expect(
      (await post(`${gateway.url}/v2/rerank`, { model: 'reranker', query: 'q', documents: ['d'] })).status,
    ).toBe(200);
    expect((await post(`${gateway.url}/tokenize`, { model: 'embedder', prompt: 'a b' })).status).toBe(200);
  });

  it('models.<m>.kind takes a kind or a list; the batch settings come from the file or the environment', () => {
    const config = loadConfig(
      {},
      {
        SLUICE_CONFIG: undefined,
        SLUICE_MAX_BATCH_INPUTS: '64',
        SLUICE_BATCH_SPLIT_SIZE: '16',
      },
    );
    expect(config.limits.maxBatchInputs).toBe(64);
    expect(config.routing.batchSplitSize).toBe(16);
    expect(parseConfig({}).limits.maxBatchInputs).toBe(2048);
    expect(parseConfig({}).routing.batchSplitSize).toBe(0);
    const kinds = parseConfig({
      models: { a: { kind: 'embedding' }, b: { kind: ['chat', 'embedding', 'chat'] } },
    });
    expect(kinds.models.a?.kind).toEqual(['embedding']);
    expect(kinds.models.b?.kind).toEqual(['chat', 'embedding']);
    expect(() => parseConfig({ models: { a: { kind: 'vision' } } })).toThrow(/models\.a\.kind/);
  });

  it('a large batch split across the workers (routing.batchSplitSize): parts at once, joined in the inputs’ order', async () => {
    const texts = Array.from({ length: 7 }, (_, i) => `passage number ${i}`);
    const { client, workers, gateway } = await setup(2, { routing: { batchSplitSize: 3 } });
    const res = await client.embeddings
      .create(
        { model: MODEL, input: texts, encoding_format: 'float' },
        { headers: { 'x-request-id': 'split-1' } },
      )
      .withResponse();
    expect(res.data.data.map((d) => d.index)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(res.data.data.map((d) => d.embedding)).toEqual(texts.map((t) => mockVector(t, MOCK_DIMENSIONS)));
    expect(res.data.usage).toEqual({ prompt_tokens: 21, total_tokens: 21 });
    // Three parts (3, 3 and 1 inputs), each its own upstream request, over both workers.
    const sent = workers.flatMap((w) =>
      w.stats.lastBodies.map((b, i) => [w.stats.requestIds[i], (b as { input: string[] }).input]),
    );
    expect(Object.fromEntries(sent)).toEqual({
      'split-1-part1': texts.slice(0, 3),
      'split-1-part2': texts.slice(3, 6),
      'split-1-part3': texts.slice(6),
    });
    expect(workers.every((w) => w.stats.requests > 0)).toBe(true);
    expect(res.response.headers.get('x-sluice-worker')?.split(', ').sort()).toEqual(['w0', 'w1']);
    // Counted as one request.
    expect(await metric(gateway.url, 'sluice_requests_total', { route: 'embeddings' })).toBe(1);
    // A batch within the size is one request.
    await client.embeddings.create({ model: MODEL, input: texts.slice(0, 3) });
    expect(workers[0]!.stats.requests + workers[1]!.stats.requests).toBe(4);
  });

  it('a part of a split batch that fails is retried on its own; a part that fails for good fails the request', async () => {
    const texts = ['a', 'b', 'c', 'd'];
    const { client, workers } = await setup(2, { routing: { batchSplitSize: 2 } }, 'http_500');
    const ok = await client.embeddings.create({ model: MODEL, input: texts, encoding_format: 'float' });
    expect(ok.data.map((d) => d.embedding)).toEqual(texts.map((t) => mockVector(t, MOCK_DIMENSIONS)));
    expect(workers[1]!.stats.requests).toBe(2);
    workers[1]!.setFault('http_400');
    const failed = await client.embeddings
      .create({ model: MODEL, input: texts })
      .catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(OpenAI.BadRequestError);
    expect((failed as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('upstream_http_error');
  });

  it('rerank (v1, v2, /rerank) and score pass through in the Cohere/Jina and vLLM shapes; tokenize and detokenize too', async () => {
    const { gateway, workers } = await setup(1);
    const documents = [
      'paris is the capital of france',
      'bananas are yellow',
      'the capital of italy is rome',
    ];
    for (const path of ['/v1/rerank', '/v2/rerank', '/rerank']) {
      const res = await post(`${gateway.url}${path}`, {
        model: MODEL,
        query: 'capital of france',
        documents,
        top_n: 2,
      });
      expect(res.status).toBe(200);
      const body = res.json() as {
        results: { index: number; relevance_score: number; document: { text: string } }[];
      };
      const ranked = documents
        .map((d, index) => ({ index, score: mockRelevance('capital of france', d) }))
        .sort((a, b) => b.score - a.score)
        .slice(0, 2);
      expect(body.results.map((r) => r.index)).toEqual(ranked.map((r) => r.index));
      expect(body.results[0]!.document.text).toBe(documents[0]);
    }
    const score = await post(`${gateway.url}/v1/score`, {
      model: MODEL,
      text_1: 'capital of france',
      text_2: documents,
    });
    expect(score.status).toBe(200);
    expect((score.json() as { data: { score: number }[] }).data.map((d) => d.score)).toEqual(
      documents.map((d) => mockRelevance('capital of france', d)),
    );
    const tokens = await post(`${gateway.url}/tokenize`, { model: MODEL, prompt: 'three little words' });
    expect(tokens.status).toBe(200);
    expect(tokens.json()).toMatchObject({ count: 3 });
    const text = await post(`${gateway.url}/detokenize`, { model: MODEL, tokens: [1, 2] });
    expect(text.json()).toEqual({ prompt: 't1 t2' });
    expect(workers[0]!.stats.requests).toBe(6);
    for (const [route, count] of [
      ['rerank', 3],
      ['score', 1],
      ['tokenize', 2],
    ] as const)
      expect(await metric(gateway.url, 'sluice_requests_total', { route, model: MODEL, status: '200' })).toBe(
        count,
      );
  });

  it('every request is on the dashboard and in the bounded metrics under its API', async () => {
    const { gateway, workers } = await setup(1);
    workers[0]!.setFault('http_500');
    const failed = await post(
      `${gateway.url}/v1/embeddings`,
      { model: MODEL, input: 'x' },
      { 'x-request-id': 'dash-e' },
    );
    expect(failed.status).toBe(502);
    workers[0]!.setFault(undefined);
    await post(`${gateway.url}/v1/embeddings`, { model: MODEL, input: 'x' }, { 'x-request-id': 'dash-ok' });
    const data = (await (await fetch(`${gateway.url}/dashboard/data`)).json()) as {
      recent: { requestId: string; route: string; status: number; code?: string; worker?: string }[];
      models: { model: string; requests: number; errors: number }[];
    };
    const recent = Object.fromEntries(data.recent.map((r) => [r.requestId, r]));
    expect(recent['dash-ok']).toMatchObject({ route: 'embeddings', status: 200, worker: 'w0' });
    expect(recent['dash-e']).toMatchObject({ route: 'embeddings', status: 502, code: 'upstream_http_error' });
    expect(data.models.find((m) => m.model === MODEL)).toMatchObject({ requests: 2, errors: 1 });
    expect(
      await metricOrZero(gateway.url, 'sluice_requests_total', { route: 'embeddings', status: '502' }),
    ).toBe(1);
  });
});
