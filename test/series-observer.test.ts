import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { GatewayMetrics, seriesObserver } from '../src/observability/metrics.js';

function histogram(registry: Registry) {
  return new Histogram({
    name: 'gap_seconds',
    help: 'gaps',
    labelNames: ['route', 'model'] as const,
    buckets: [0.001, 0.01, 0.1, 1],
    registers: [registry],
  });
}

const labels = { route: 'chat_completions', model: 'm' };

/**
 * The exposition text with each `_sum` rounded to 9 decimals: added a batch at a time, the sum
 * of the same values differs from prom-client's one-by-one sum in its last bits.
 */
async function scrape(registry: Registry): Promise<string> {
  return (await registry.metrics()).replace(
    /(_sum\{[^}]*\} )(\S+)/g,
    (_, head: string, value: string) => `${head}${Number(Number(value).toFixed(9))}`,
  );
}

describe('seriesObserver (the inter-token histogram, folded per stream)', () => {
  it('scrapes exactly as observe does once flushed, before and after a reset and a zero, beside other series', async () => {
    const viaObserve = new Registry();
    const viaSeries = new Registry();
    const a = histogram(viaObserve);
    const b = histogram(viaSeries);
    const gaps = seriesObserver(b, labels);
    // Values in every bucket and past the last bound (+Inf), more than one fold's worth.
    const values = Array.from({ length: 500 }, (_, i) => (i % 7 === 0 ? 5 : (i % 13) / 100));
    for (const v of values) {
      a.observe(labels, v);
      gaps.observe(v);
    }
    a.observe({ route: 'chat_completions', model: 'other' }, 0.5);
    b.observe({ route: 'chat_completions', model: 'other' }, 0.5);
    gaps.flush();
    expect(await scrape(viaSeries)).toBe(await scrape(viaObserve));
    viaObserve.resetMetrics();
    viaSeries.resetMetrics();
    for (const v of [0.05, 0.5, 2]) {
      a.observe(labels, v);
      gaps.observe(v);
    }
    gaps.flush();
    expect(await scrape(viaSeries)).toBe(await scrape(viaObserve));
    a.zero(labels);
    b.zero(labels);
    a.observe(labels, 0.002);
    gaps.observe(0.002);
    gaps.flush();
    gaps.flush();
    expect(await scrape(viaSeries)).toBe(await scrape(viaObserve));
  });

  it('a scrape lags by at most 64 values or a second of them, without a flush', async () => {
    const registry = new Registry();
    const h = histogram(registry);
    const gaps = seriesObserver(h, labels);
    const count = async () =>
      (await h.get()).values.find((v) => v.metricName === 'gap_seconds_count')?.value ?? 0;
    for (let i = 0; i < 63; i++) gaps.observe(0.005);
    expect(await count()).toBe(0);
    gaps.observe(0.005);
    expect(await count()).toBe(64);
    // Slow tokens: two gaps of 0.6 s add up to more than a second.
    gaps.observe(0.6);
    expect(await count()).toBe(64);
    gaps.observe(0.6);
    expect(await count()).toBe(66);
  });

  it('a stream that ends flushes its gaps: the metric counts them at once', async () => {
    const registry = new Registry();
    const h = histogram(registry);
    const gaps = seriesObserver(h, labels);
    for (const v of [0.02, 0.03, 0.04]) gaps.observe(v);
    gaps.flush();
    const values = (await h.get()).values;
    expect(values.find((v) => v.metricName === 'gap_seconds_count')?.value).toBe(3);
    expect(values.find((v) => v.metricName === 'gap_seconds_sum')?.value).toBeCloseTo(0.09, 10);
  });

  it("a gateway's folded series are shared per route and model, and every read of the histogram sees all of them", async () => {
    const metrics = new GatewayMetrics(false);
    const ttft = metrics.folded(metrics.timeToFirstToken, 'chat_completions', 'm');
    expect(metrics.folded(metrics.timeToFirstToken, 'chat_completions', 'm')).toBe(ttft);
    expect(metrics.folded(metrics.timeToFirstToken, 'completions', 'm')).not.toBe(ttft);
    expect(metrics.folded(metrics.requestDuration, 'chat_completions', 'm')).not.toBe(ttft);
    // Fewer values than a fold holds, and far from a second: nothing reached prom-client yet.
    for (const v of [0.02, 0.03]) ttft.observe(v);
    metrics.folded(metrics.timeToFirstToken, 'completions', 'm').observe(0.5);
    const text = await metrics.registry.metrics();
    expect(text).toContain('sluice_time_to_first_token_seconds_count{route="chat_completions",model="m"} 2');
    expect(text).toContain(
      'sluice_time_to_first_token_seconds_bucket{le="0.025",route="chat_completions",model="m"} 1',
    );
    expect(text).toContain('sluice_time_to_first_token_seconds_count{route="completions",model="m"} 1');
    // The dashboard reads the histogram itself: the same values, not counted twice.
    ttft.observe(0.04);
    const values = (await metrics.timeToFirstToken.get()).values;
    const count = values.find(
      (v) =>
        v.metricName === 'sluice_time_to_first_token_seconds_count' && v.labels.route === 'chat_completions',
    );
    expect(count?.value).toBe(3);
  });
});
