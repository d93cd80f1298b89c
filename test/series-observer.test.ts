import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { seriesObserver } from '../src/observability/metrics.js';

function histogram(registry: Registry) {
  return new Histogram({
    name: 'gap_seconds',
    help: 'gaps',
    labelNames: ['route', 'model'] as const,
    buckets: [0.001, 0.01, 0.1, 1],
    registers: [registry],
  });
}

describe('seriesObserver', () => {
  it('scrapes exactly as observe does, before and after a reset, beside other series', async () => {
    const viaObserve = new Registry();
    const viaSeries = new Registry();
    const a = histogram(viaObserve);
    const b = histogram(viaSeries);
    const labels = { route: 'chat_completions', model: 'm' };
    const observe = seriesObserver(b, labels);
    const values = Array.from({ length: 500 }, (_, i) => (i % 7 === 0 ? 5 : (i % 13) / 100));
    for (const v of values) {
      a.observe(labels, v);
      observe(v);
    }
    a.observe({ route: 'chat_completions', model: 'other' }, 0.5);
    b.observe({ route: 'chat_completions', model: 'other' }, 0.5);
    expect(await viaSeries.metrics()).toBe(await viaObserve.metrics());
    viaObserve.resetMetrics();
    viaSeries.resetMetrics();
    for (const v of [0.05, 0.5, 2]) {
      a.observe(labels, v);
      observe(v);
    }
    expect(await viaSeries.metrics()).toBe(await viaObserve.metrics());
    a.zero(labels);
    b.zero(labels);
    a.observe(labels, 0.002);
    observe(0.002);
    expect(await viaSeries.metrics()).toBe(await viaObserve.metrics());
  });
});
