import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import type { SluiceConfigInput } from '../src/config/schema.js';
import type { Gateway } from '../src/gateway.js';
import {
  newestSeriesOf,
  parseSamples,
  readEngineSignals,
  wantedMetricNames,
} from '../src/workers/engine-metric-names.js';
import { type KeptLimits, KeptTooLarge, keptLines } from '../src/workers/kept-lines.js';
import type { Worker } from '../src/workers/worker.js';
import { eventually, metricOrZero, startGateway } from './helpers/gateway.js';
import { type MetricsEngine, startMetricsEngine, VLLM_METRICS } from './helpers/metrics-engine.js';

/**
 * Issue 48: one read of a worker's `/metrics` costs the event loop a small, bounded time
 * whatever the worker writes (src/workers/kept-lines.ts), and real engines are read as before.
 */

const DEFAULT_LIMITS: KeptLimits = { maxBytes: 4 * 1024 * 1024, maxSampleBytes: 64 * 1024 };

/** The body in 64 KiB chunks through the scraper's reading. */
async function keep(text: string, limits = DEFAULT_LIMITS): Promise<string> {
  const buf = Buffer.from(text);
  const chunks: Buffer[] = [];
  for (let i = 0; i < buf.length; i += 65_536) chunks.push(buf.subarray(i, i + 65_536));
  return keptLines(
    Readable.from(chunks),
    wantedMetricNames('auto'),
    newestSeriesOf('auto'),
    limits,
    '/metrics',
  );
}

const readAll = (text: string) => readEngineSignals(parseSamples(text), 'auto', 1_000);

/** `count` series of vLLM's LoRA gauge, of combinations seen over a long run, older than VLLM_METRICS's. */
function loraHistory(count: number, labels = ''): string {
  const lines: string[] = [];
  for (let i = 0; i < count; i++) {
    lines.push(
      `vllm:lora_requests_info{${labels}max_lora="4",running_lora_adapters="old-${i % 97},old-${i}",waiting_lora_adapters="w-${i % 7}"} ${1.7e9 + i}`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/** 200,000 adapter names in vLLM's LoRA label, in lines under the scraper's bound of a line. */
function hostileLora(bytes: number): string {
  const lines = ['vllm:num_requests_running 1', 'vllm:num_requests_waiting 0'];
  let total = 0;
  for (let n = 0; total < bytes; ) {
    const names: string[] = [];
    for (let len = 0; len < 240_000; len += names.at(-1)!.length + 1) names.push(`adapter-${n++}`);
    const line = `vllm:lora_requests_info{max_lora="8",running_lora_adapters="${names.join(',')}",waiting_lora_adapters=""} ${1.7e9 + n}`;
    lines.push(line);
    total += line.length + 1;
  }
  return `${lines.join('\n')}\n`;
}

describe('the lines kept of a /metrics', () => {
  it("keeps of vLLM's LoRA gauge only the newest series of each scheduler, read exactly as the whole text", async () => {
    // Two schedulers' histories interleaved, label sets written in other orders and spacings,
    // ties on the newest time, escaped quotes and `}`/`,` inside values: what is read of the
    // kept lines is what is read of all of them.
    const tricky = [
      'vllm:lora_requests_info{engine="0",max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.8e9',
      'vllm:lora_requests_info{running_lora_adapters="c",engine="0",max_lora="4",waiting_lora_adapters="d"} 1.8e9',
      'vllm:lora_requests_info{engine ="1",max_lora="2",running_lora_adapters="x\\"}, 9",waiting_lora_adapters=""} 1.79e9',
      'vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="y,engine=\\"0\\"",waiting_lora_adapters="",} 1.78e9',
      'vllm:lora_requests_info{engine="2",max_lora="3",running_lora_adapters="z",waiting_lora_adapters=""} 1.6e9 1700000000000',
    ].join('\n');
    const text = `${loraHistory(300, 'engine="0",')}${VLLM_METRICS}${tricky}\n${loraHistory(300, 'engine="1",')}`;
    const kept = await keep(text);
    expect(kept.split('\n').filter((l) => l.startsWith('vllm:lora_requests_info')).length).toBeLessThan(8);
    const whole = readAll(text);
    expect(whole.ok).toBe(true);
    expect(readAll(kept)).toEqual(whole);
    // The fixture alone, as it was.
    expect(readAll(await keep(VLLM_METRICS))).toEqual(readAll(VLLM_METRICS));
  });

  it('keeps a LoRA series whose value is no number, for the reading to refuse', async () => {
    const text = `${VLLM_METRICS}vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} NaN\n`;
    expect(readAll(await keep(text))).toMatchObject({ ok: false, reason: 'invalid_values' });
  });

  it("reads a long-running vLLM's LoRA history of more series than the bound of kept lines", async () => {
    const text = loraHistory(20_000) + VLLM_METRICS;
    expect(text.length).toBeGreaterThan(2 * 1024 * 1024);
    const parse = readAll(await keep(text));
    expect(parse).toMatchObject({
      ok: true,
      signals: { lora: { running: ['sql-lora', 'chat-lora'], waiting: ['summ-lora'], max: 4 } },
    });
  });

  it('refuses, before any parse, wanted lines past maxSampleBytes: many series, long labels, 200,000 adapter names', async () => {
    const series = Array.from(
      { length: 9_000 },
      (_, i) => `vllm:num_requests_running{engine="${i}",pad="${'x'.repeat(340)}"} 0`,
    ).join('\n');
    const label = `vllm:num_requests_waiting{pad="${'y'.repeat(200_000)}"} 0\n`;
    for (const text of [series, label, hostileLora(3.9e6)]) {
      await expect(keep(text)).rejects.toThrow(KeptTooLarge);
      await expect(keep(text)).rejects.toThrow(
        'more than 65536 bytes of engine metrics (signals.maxSampleBytes)',
      );
    }
    // A bound set higher keeps them.
    expect((await keep(label, { ...DEFAULT_LIMITS, maxSampleBytes: 256 * 1024 })).length).toBe(
      label.length - 1,
    );
  });
});

describe('a hostile /metrics through a gateway', () => {
  const engines: MetricsEngine[] = [];
  const gateways: Gateway[] = [];
  afterEach(async () => {
    await Promise.all(gateways.splice(0).map((g) => g.close()));
    await Promise.all(engines.splice(0).map((e) => e.close()));
  });
  const gateway = async (url: string, signals: SluiceConfigInput['signals'] = {}) => {
    const g = await startGateway({
      workers: [{ url }],
      // Read often, and a refused worker is asked again soon: every read is measured.
      signals: { intervalMs: 50, timeoutMs: 2_000, staleMs: 300, missingRetryMs: 100, ...signals },
    });
    gateways.push(g);
    return g;
  };
  const workerOf = (g: Gateway, url: string): Worker => g.context.registry.list().find((w) => w.url === url)!;

  /** The longest the event loop of this process (the gateway's) was held over `ms`, and the reads made. */
  const loopHeld = async (engine: MetricsEngine, ms: number) => {
    const reads = engine.stats.metricsRequests;
    const delay = monitorEventLoopDelay({ resolution: 5 });
    delay.enable();
    await new Promise((resolve) => setTimeout(resolve, ms));
    delay.disable();
    return { max: delay.max / 1e6, mean: delay.mean / 1e6, reads: engine.stats.metricsRequests - reads };
  };

  it("holds the event loop no longer under MBs of an engine's wanted families than under a normal /metrics, and refuses the reading as too_large", async () => {
    const normal = await startMetricsEngine({ kind: 'text', body: VLLM_METRICS });
    engines.push(normal);
    const g0 = await gateway(normal.url);
    await eventually(() => workerOf(g0, normal.url).signals().state === 'fresh');
    const baseline = await loopHeld(normal, 2_000);
    await g0.close();

    const hostileBody = hostileLora(3.9e6);
    const hostile = await startMetricsEngine({ kind: 'text', body: hostileBody });
    engines.push(hostile);
    const g = await gateway(hostile.url);
    const worker = workerOf(g, hostile.url);
    await eventually(() => hostile.stats.metricsRequests >= 2);
    const under = await loopHeld(hostile, 2_000);
    // The hostile worker was read again and again meanwhile.
    expect(under.reads).toBeGreaterThanOrEqual(5);
    // Measured here: baseline max 10-18 ms, mean 5.2-5.4 (the 5 ms resolution); hostile, refused
    // before its parse: max 25-46 ms, mean 5.3-6.2. Before the bound: a parse of 250-350 ms a read.
    const seen = JSON.stringify({ baseline, under });
    expect(under.mean, seen).toBeLessThan(2 * baseline.mean);
    expect(under.max, seen).toBeLessThan(8 * baseline.max);
    expect(worker.signals()).toMatchObject({
      state: 'missing',
      reason: expect.stringContaining('signals.maxSampleBytes'),
      signals: { source: 'none' },
    });
    expect(
      await metricOrZero(g.url, 'sluice_worker_signal_scrape_failures_total', {
        worker: worker.id,
        cause: 'too_large',
      }),
    ).toBeGreaterThanOrEqual(5);
  }, 20_000);
});
