import { describe, expect, it } from 'vitest';
import { eventually, perTest } from './helpers/gateway.js';

/**
 * Issue 49, part 4: a burst sent before any engine has reported a full batch (readings every
 * 250 ms, dispatch per request: llm-d-router#2066's stale gate) went straight to the engines and
 * waited in their queues. What this gateway sent since the last reading counts against a batch
 * known before any reading (the worker's `maxBatch`, the engine's report, a default), so a cold
 * burst waits in the gateway. The engines are the mock's engine model (continuous batching, a
 * queue, vLLM's metric names).
 */
describe('a cold burst (issue 49)', () => {
  const fx = perTest();

  it('60 streams at once to two cold engines of batch 3 leave at most batch + maxWaiting in each; the rest wait in the gateway', async () => {
    const engines = await fx.mocks(2, {
      models: ['m'],
      engine: { maxBatch: 3, decodeTokensPerSecond: 20 },
    });
    const gw = await fx.gateway({
      workers: engines.map((e, i) => ({ url: e.url, id: `e${i}`, maxBatch: 3 })),
      routing: { policy: 'scorer', scorer: { saturation: { maxWaiting: 2 } } },
      // Cold: read once at start (nothing running, nothing waiting), not again during the burst.
      signals: { intervalMs: 60_000 },
    });
    const stop = new AbortController();
    const body = JSON.stringify({
      model: 'm',
      stream: true,
      max_tokens: 400,
      messages: [{ role: 'user', content: 'a long answer, please' }],
    });
    const streams = Array.from({ length: 60 }, () =>
      fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        signal: stop.signal,
      }).catch(() => undefined),
    );
    const inEngine = (i: number) => engines[i]!.engine!.numRunning + engines[i]!.engine!.numWaiting;
    // Every stream is somewhere: in an engine or in the gateway's queue.
    await eventually(() => inEngine(0) + inEngine(1) + gw.flow!.waiting('m') === 60, 10_000);
    expect(inEngine(0)).toBeLessThanOrEqual(3 + 2);
    expect(inEngine(1)).toBeLessThanOrEqual(3 + 2);
    expect(gw.flow!.waiting('m')).toBeGreaterThanOrEqual(60 - 2 * (3 + 2));
    stop.abort();
    await Promise.all(streams);
  });
});
