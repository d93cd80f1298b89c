import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineMetrics } from '../src/engine/engine-metrics.js';
import { createLlamaWorker, type LlamaWorker } from '../src/engine/llama-worker.js';
import { writeTinyModel } from '../src/engine/tiny-model.js';
import type { Gateway } from '../src/gateway.js';
import { parseSamples, readEngineSignals } from '../src/workers/engine-metric-names.js';
import { eventually, startGateway } from './helpers/gateway.js';

/** `sluice worker`'s /metrics: vLLM's names, honest values, read by a gateway as a vLLM engine's. */

const MODEL = 'tiny';

describe("the embedded engine's metrics", () => {
  it("renders vLLM's names, which the gateway reads back as the load it was given", async () => {
    const load = {
      waiting: 3,
      running: 2,
      kvCacheUsage: 0.125,
      prefixCacheQueries: 640,
      prefixCacheHits: 320,
    };
    const metrics = new EngineMetrics('model "with" \\ quotes', () => load);
    const text = await metrics.render();
    expect(text).toContain('# TYPE vllm:prefix_cache_queries_total counter');
    expect(text).toContain('vllm:num_requests_waiting{model_name="model \\"with\\" \\\\ quotes"} 3');
    const read = readEngineSignals(parseSamples(text), 'vllm', 5);
    expect(read).toEqual({
      ok: true,
      signals: {
        waiting: 3,
        running: 2,
        kvCacheUsage: 0.125,
        prefixCacheHits: 320,
        prefixCacheQueries: 640,
        prefixCacheHitRate: undefined,
        lora: undefined,
        scrapedAt: 5,
        source: 'vllm',
      },
    });
    load.waiting = 0;
    load.prefixCacheQueries = 700;
    expect(await metrics.render()).toContain(
      'vllm:prefix_cache_queries_total{model_name="model \\"with\\" \\\\ quotes"} 700',
    );
    expect(await metrics.render()).toContain(
      'vllm:num_requests_waiting{model_name="model \\"with\\" \\\\ quotes"} 0',
    );
  });

  describe('sluice worker on the tiny model, one slot', () => {
    let dir: string;
    let worker: LlamaWorker;
    let gateway: Gateway | undefined;

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'sluice-engine-metrics-'));
      const modelPath = join(dir, 'tiny.gguf');
      await writeTinyModel(modelPath, { seed: 1 });
      worker = await createLlamaWorker({ modelPath, slots: 1, modelName: MODEL });
    });
    afterAll(async () => {
      await gateway?.close();
      await worker?.close();
      await rm(dir, { recursive: true, force: true });
    });

    const signals = async () => {
      const response = await fetch(`${worker.url}/metrics`);
      expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
      const read = readEngineSignals(parseSamples(await response.text()), 'vllm', 0);
      if (!read.ok) throw new Error(read.message);
      return read.signals;
    };

    it('counts a repeated prompt as prefix-cache hits on every token but the last, and frees its KV cells after', async () => {
      expect(await signals()).toMatchObject({
        waiting: 0,
        running: 0,
        kvCacheUsage: 0,
        prefixCacheQueries: 0,
        prefixCacheHits: 0,
      });
      const client = new OpenAI({ baseURL: `${worker.url}/v1`, apiKey: 'x', maxRetries: 0 });
      const ask = () =>
        client.completions.create({ model: MODEL, prompt: 'the same prompt twice', max_tokens: 4, seed: 1 });
      const first = await ask();
      const prompt = first.usage!.prompt_tokens;
      expect(await signals()).toMatchObject({
        prefixCacheQueries: prompt,
        prefixCacheHits: 0,
        kvCacheUsage: 0,
      });
      const second = await ask();
      expect(second.usage!.prompt_tokens).toBe(prompt);
      // The one slot kept the first prompt's state: all of it is reused but the last token,
      // which is evaluated again for the logits of the first new token.
      expect(await signals()).toMatchObject({
        waiting: 0,
        running: 0,
        prefixCacheQueries: 2 * prompt,
        prefixCacheHits: prompt - 1,
        kvCacheUsage: 0,
      });
    });

    it('shows a request generating as running, with KV cells in use', async () => {
      const controller = new AbortController();
      const stream = await fetch(`${worker.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          prompt: 'go on',
          max_tokens: 2_000,
          ignore_eos: true,
          stream: true,
        }),
        signal: controller.signal,
      });
      expect(stream.status).toBe(200);
      const reader = stream.body!.getReader();
      await reader.read();
      const during = await signals();
      controller.abort();
      await reader.cancel().catch(() => {});
      expect(during.running).toBe(1);
      expect(during.kvCacheUsage).toBeGreaterThan(0);
      await eventually(async () => (await signals()).running === 0);
    });

    it('is read by a gateway as a vLLM engine', async () => {
      gateway = await startGateway({ workers: [{ url: worker.url }], signals: { intervalMs: 100 } });
      const registered = gateway.context.registry.list()[0]!;
      await eventually(() => registered.signals().state === 'fresh');
      expect(registered.signals().signals).toMatchObject({ source: 'vllm', waiting: 0, running: 0 });
    });
  });
});
