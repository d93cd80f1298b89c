import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { chatTokens } from '../src/mock/engine-tokens.js';
import { createMockWorker, type MockWorker, type MockWorkerOptions } from '../src/mock/mock-worker.js';
import { startCli } from './helpers/cli.js';
import { eventually, post, samples, sseData } from './helpers/gateway.js';

/**
 * The mock worker with its engine model, over HTTP: what the wire and `/metrics` show. Times are
 * the engine's and are not asserted here (the model's own tests do, under a virtual clock):
 * these check counts, states and what the engine reports.
 */

const workers: MockWorker[] = [];
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close()));
});

async function engineWorker(engine: MockWorkerOptions['engine'] = {}, extra: MockWorkerOptions = {}) {
  const worker = await createMockWorker({ ...extra, engine });
  workers.push(worker);
  return worker;
}

const SYSTEM = 'You answer questions about the tides and the moon in plain words. '.repeat(12);
const messages = (user: string) => [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: user },
];

async function metricValue(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const found = samples(text, name);
  if (found.length !== 1) throw new Error(`${name}: ${found.length} series in\n${text}`);
  return found[0]!.value;
}

describe('the mock worker with an engine model', () => {
  it("streams the tokens the engine computes, and counts the prompt in the engine's tokens", async () => {
    const worker = await engineWorker({ decodeTokensPerSecond: 500 });
    const res = await post(`${worker.url}/v1/chat/completions`, {
      model: 'mock-model',
      messages: messages('When is high tide?'),
      stream: true,
      max_tokens: 5,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    const chunks = sseData(res.text)
      .filter((d) => d !== '[DONE]')
      .map(
        (d) =>
          JSON.parse(d) as {
            choices: { delta?: { content?: string }; finish_reason: string | null }[];
            usage?: { prompt_tokens: number; completion_tokens: number };
          },
      );
    const content = chunks.flatMap((c) => c.choices.map((ch) => ch.delta?.content ?? '')).join('');
    expect(content).toBe(' the quick brown fox jumps');
    expect(chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter(Boolean)).toEqual([
      'length',
    ]);
    const usage = chunks.at(-1)!.usage!;
    expect(usage.prompt_tokens).toBe(chatTokens(messages('When is high tide?')).length);
    expect(usage.completion_tokens).toBe(5);
    expect(worker.engine!.stats.generationTokens).toBe(5);
  });

  it('keeps every token the engine computes while a fault delays the first event', async () => {
    const worker = await engineWorker({ decodeTokensPerSecond: 1000 });
    const res = await post(
      `${worker.url}/v1/chat/completions`,
      { model: 'mock-model', messages: messages('q'), stream: true, max_tokens: 6 },
      { 'x-mock-fault': 'delay_first:100' },
    );
    expect(res.status).toBe(200);
    const data = sseData(res.text);
    const content = data
      .filter((d) => d !== '[DONE]')
      .map(
        (d) =>
          (JSON.parse(d) as { choices: { delta: { content?: string } }[] }).choices[0]!.delta.content ?? '',
      )
      .join('');
    expect(content).toBe(' the quick brown fox jumps over');
    expect(data.at(-1)).toBe('[DONE]');
  });

  it('answers a request that is not streamed when the engine has generated it', async () => {
    const worker = await engineWorker({ decodeTokensPerSecond: 500 });
    const res = await post(`${worker.url}/v1/completions`, {
      model: 'mock-model',
      prompt: 'the tide',
      max_tokens: 3,
    });
    expect(res.status).toBe(200);
    const body = res.json() as { choices: { text: string }[]; usage: { prompt_tokens: number } };
    expect(body.choices[0]!.text).toBe(' the quick brown');
    expect(body.usage.prompt_tokens).toBe(2); // "the", "tide"
    expect(worker.engine!.stats.finished).toBe(1);
  });

  it('GET /metrics counts a repeated prefix as hits; POST /reset_prefix_cache forgets it', async () => {
    const worker = await engineWorker({ decodeTokensPerSecond: 500, blockSize: 16 });
    const ask = async (user: string) => {
      const res = await post(`${worker.url}/v1/chat/completions`, {
        model: 'mock-model',
        messages: messages(user),
        max_tokens: 2,
      });
      expect(res.status).toBe(200);
    };
    await ask('first question');
    expect(await metricValue(worker.url, 'vllm:prefix_cache_hits_total')).toBe(0);
    await ask('second question');
    const shared = chatTokens(messages('')).length - 1; // the system message and the user marker
    const hits = await metricValue(worker.url, 'vllm:prefix_cache_hits_total');
    expect(hits).toBe(Math.floor(shared / 16) * 16);
    const queries = await metricValue(worker.url, 'vllm:prefix_cache_queries_total');
    expect(queries).toBe(
      chatTokens(messages('first question')).length + chatTokens(messages('second question')).length,
    );
    const reset = await post(`${worker.url}/reset_prefix_cache`, {});
    expect(reset.status).toBe(200);
    await ask('third question');
    expect(await metricValue(worker.url, 'vllm:prefix_cache_hits_total')).toBe(hits);
  });

  it('a request beyond the batch waits in the queue, as /metrics shows, then runs', async () => {
    const worker = await engineWorker({ maxBatch: 1, decodeTokensPerSecond: 50 });
    const long = fetch(`${worker.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-model',
        messages: messages('long'),
        stream: true,
        max_tokens: 400,
      }),
    });
    const first = await long;
    const reader = first.body!.getReader();
    await reader.read();
    const second = post(`${worker.url}/v1/chat/completions`, {
      model: 'mock-model',
      messages: messages('short'),
      max_tokens: 1,
    });
    await eventually(() => worker.stats.requests === 2);
    await eventually(() => worker.engine!.numWaiting === 1);
    expect(await metricValue(worker.url, 'vllm:num_requests_running')).toBe(1);
    expect(await metricValue(worker.url, 'vllm:num_requests_waiting')).toBe(1);
    expect(await metricValue(worker.url, 'vllm:kv_cache_usage_perc')).toBeGreaterThan(0);
    await reader.cancel();
    expect((await second).status).toBe(200);
    expect(worker.engine!.stats.finishedBy).toEqual({ stop: 0, length: 1, abort: 1 });
  });

  it('a client that leaves mid-stream frees its blocks and its batch slot', async () => {
    const worker = await engineWorker({ decodeTokensPerSecond: 50 });
    const controller = new AbortController();
    const res = await fetch(`${worker.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-model', messages: messages('q'), stream: true, max_tokens: 1000 }),
      signal: controller.signal,
    });
    await res.body!.getReader().read();
    expect(worker.engine!.numRunning).toBe(1);
    controller.abort();
    await eventually(() => worker.engine!.stats.aborted === 1);
    expect(worker.engine!.numRunning).toBe(0);
    expect(worker.engine!.kvUsage).toBe(0);
    expect(worker.stats.aborted).toBe(1);
  });

  it('serves its LoRA adapters as models, each listed with its base model as parent', async () => {
    const worker = await engineWorker(
      { adapters: ['sql-lora'], decodeTokensPerSecond: 500 },
      { models: ['base'] },
    );
    const models = (await (await fetch(`${worker.url}/v1/models`)).json()) as {
      data: { id: string; parent?: string }[];
    };
    expect(models.data.map((m) => [m.id, m.parent ?? null])).toEqual([
      ['base', null],
      ['sql-lora', 'base'],
    ]);
    const res = await post(`${worker.url}/v1/chat/completions`, {
      model: 'sql-lora',
      messages: messages('q'),
      max_tokens: 2,
    });
    expect(res.status).toBe(200);
    expect(worker.engine!.stats.loraLoads).toBe(1);
    const text = await (await fetch(`${worker.url}/metrics`)).text();
    expect(samples(text, 'vllm:lora_requests_info').map((s) => s.labels)).toEqual([
      { max_lora: '1', running_lora_adapters: '', waiting_lora_adapters: '' },
    ]);
    expect(
      (await post(`${worker.url}/v1/chat/completions`, { model: 'other', messages: messages('q') })).status,
    ).toBe(404);
  });

  it('refuses with 400 a request that could never fit in its KV cache', async () => {
    const worker = await engineWorker({ cacheBlocks: 4, blockSize: 16 });
    const res = await post(`${worker.url}/v1/chat/completions`, {
      model: 'mock-model',
      messages: messages('q'),
      max_tokens: 2,
    });
    expect(res.status).toBe(400);
    expect((res.json() as { message: string }).message).toMatch(/KV-cache blocks/);
    expect(worker.stats.inflight).toBe(0);
  });

  it('keeps the times of a request traced with x-mock-trace-id, on its own clock, until they are taken', async () => {
    const worker = await engineWorker({ decodeTokensPerSecond: 500, blockSize: 16 });
    const ask = (trace: string | undefined) =>
      post(
        `${worker.url}/v1/chat/completions`,
        { model: 'mock-model', messages: messages('q'), max_tokens: 2 },
        trace === undefined ? {} : { 'x-mock-trace-id': trace },
      );
    expect((await ask('first')).status).toBe(200);
    expect((await ask(undefined)).status).toBe(200);
    expect((await ask('third')).status).toBe(200);
    const traced = (await (await fetch(`${worker.url}/mock/engine/requests`)).json()) as {
      id: string;
      state: string;
      hitTokens: number;
      promptTokens: number;
      arrivedAt: number;
      admittedAt: number;
      firstTokenAt: number;
      finishedAt: number;
    }[];
    expect(traced.map((t) => [t.id, t.state])).toEqual([
      ['first', 'finished'],
      ['third', 'finished'],
    ]);
    const third = traced[1]!;
    expect(third.promptTokens).toBe(chatTokens(messages('q')).length);
    expect(third.hitTokens).toBe(Math.floor((third.promptTokens - 1) / 16) * 16);
    expect(third.admittedAt).toBeGreaterThanOrEqual(third.arrivedAt);
    expect(third.firstTokenAt).toBeGreaterThan(third.admittedAt);
    expect(third.finishedAt).toBeGreaterThan(third.firstTokenAt);
    expect(await (await fetch(`${worker.url}/mock/engine/requests`)).json()).toEqual([]);
    const stats = (await (await fetch(`${worker.url}/mock/engine`)).json()) as {
      requests: number;
      finished: number;
    };
    expect(stats).toMatchObject({ requests: 3, finished: 3 });
  });

  it('has no /metrics without an engine model', async () => {
    const worker = await createMockWorker();
    workers.push(worker);
    expect((await fetch(`${worker.url}/metrics`)).status).toBe(404);
  });

  it('sluice mock-worker takes the engine flags', async () => {
    const proc = startCli([
      'mock-worker',
      '--port',
      '0',
      '--max-batch',
      '3',
      '--cache-blocks',
      '128',
      '--lora',
      'a,b',
      '--max-loras',
      '2',
    ]);
    try {
      const url = await proc.url;
      const text = await (await fetch(`${url}/metrics`)).text();
      expect(samples(text, 'vllm:cache_config_info')[0]!.labels).toMatchObject({
        block_size: '16',
        num_gpu_blocks: '128',
      });
      expect(samples(text, 'vllm:lora_requests_info')[0]!.labels).toMatchObject({ max_lora: '2' });
    } finally {
      proc.child.kill('SIGTERM');
      await once(proc.child, 'exit');
    }
  });

  it('sluice mock-worker refuses engine flags that contradict each other', async () => {
    const proc = startCli(['mock-worker', '--port', '0', '--max-batch', '64', '--max-batched-tokens', '32']);
    proc.url.catch(() => {}); // it never listens
    const [code] = (await once(proc.child, 'exit')) as [number];
    expect(code).toBe(2);
    expect(proc.output()).toMatch(/maxBatchedTokens \(32\) must be >= engine\.maxBatch \(64\)/);
  });
});
