import { afterEach, describe, expect, it, vi } from 'vitest';
import { eventually, perTest, post } from './helpers/gateway.js';
import { ENGINE_MODEL, type MetricsEngine, startMetricsEngine } from './helpers/metrics-engine.js';

/**
 * Issue 49, part 5: readings' staleness and every routing duration are measured on the monotonic
 * clock. A step of the wall clock (ntpd, a VM resumed, an operator) of ±10 minutes during a run
 * made every reading stale, and a gateway whose every reading is stale holds nothing.
 */
const saturated = {
  kind: 'text' as const,
  body: [
    '# TYPE vllm:num_requests_running gauge',
    'vllm:num_requests_running{engine="0"} 4.0',
    '# TYPE vllm:num_requests_waiting gauge',
    'vllm:num_requests_waiting{engine="0"} 5.0',
    '',
  ].join('\n'),
};

const engines: MetricsEngine[] = [];
afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(engines.splice(0).map((e) => e.close()));
});

describe('a step of the wall clock (issue 49)', () => {
  const fx = perTest();

  it('changes no routing decision: a request the saturated fleet holds stays held after ±10 minutes', async () => {
    const e = await startMetricsEngine(saturated);
    engines.push(e);
    const gw = await fx.gateway({
      workers: [{ url: e.url, id: 'e' }],
      routing: { policy: 'scorer', scorer: { saturation: { maxWaiting: 1 } } },
      // One reading, at start: no new reading hides what the clock did to the old one.
      signals: { intervalMs: 60_000 },
      flow: { pollMs: 5 },
    });
    const ask = { model: ENGINE_MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] };
    const held = post(`${gw.url}/v1/chat/completions`, ask, { 'x-sluice-max-wait-ms': '20000' });
    await eventually(() => gw.flow!.waiting(ENGINE_MODEL) === 1);
    const fresh = () => gw.context.registry.list()[0]!.signals().state;
    expect(fresh()).toBe('fresh');
    vi.useFakeTimers({ toFake: ['Date'] });
    for (const step of [10 * 60_000, -20 * 60_000]) {
      vi.setSystemTime(Date.now() + step);
      // A settle of forty looks of the queue (pollMs 5): with staleness on the wall clock the
      // request left at the first.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(fresh()).toBe('fresh');
      expect(gw.flow!.waiting(ENGINE_MODEL)).toBe(1);
      expect(e.stats.chats).toBe(0);
    }
    vi.useRealTimers();
    // It goes once the engine has room.
    e.metrics = { kind: 'text', body: saturated.body.replace('5.0', '0.0') };
    await gw.signals.tick(Number.POSITIVE_INFINITY);
    expect((await held).status).toBe(200);
  });
});
