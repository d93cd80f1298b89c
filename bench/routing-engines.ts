/**
 * What the routing benchmark (bench/routing.ts) reads from its fleet's engines: their gauges and
 * counters from /metrics, whether they are idle, and from the mock's own endpoints each traced
 * request's time to first token and the engines' lateness.
 */
import { appendFileSync } from 'node:fs';
import parsePrometheusText from 'parse-prometheus-text-format';

/** One engine's gauges and counters, from its /metrics. */
export interface EngineSample {
  running: number;
  waiting: number;
  queries: number;
  hits: number;
}

async function scrape(url: string): Promise<EngineSample> {
  const text = await (await fetch(`${url}/metrics`)).text();
  // The parser drops the last sample of a text that does not end its last line.
  const families = parsePrometheusText(text.endsWith('\n') ? text : `${text}\n`);
  // The first sample of the first family of that name that has one, 0 if none has. A family is
  // named as its samples are: a counter's `_total` samples make a family `<base>_total`, after an
  // empty `<base>` family when the TYPE line names the counter `<base>` (as prometheus_client does).
  const value = (...names: string[]) => {
    for (const name of names) {
      const sample = families.find((f) => f.name === name && f.metrics.length > 0)?.metrics[0];
      if (sample) return Number(sample.value);
    }
    return 0;
  };
  const counter = (base: string) => value(`${base}_total`, base);
  return {
    running: value('vllm:num_requests_running'),
    waiting: value('vllm:num_requests_waiting'),
    queries: counter('vllm:prefix_cache_queries'),
    hits: counter('vllm:prefix_cache_hits'),
  };
}

export const scrapeAll = (urls: string[]) => Promise.all(urls.map(scrape));
export const sum = (samples: EngineSample[], f: (s: EngineSample) => number) =>
  samples.reduce((n, s) => n + f(s), 0);

/** Waits until no engine runs or queues a request (the cell before may leave some being cut). */
export async function idle(urls: string[]): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const samples = await scrapeAll(urls);
    if (sum(samples, (s) => s.running + s.waiting) === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('the engines did not go idle within 10 s');
}

/** An engine's lateness counters, from GET /mock/engine. */
export interface Lateness {
  steps: number;
  totalMs: number;
  over5ms: number;
}

interface Traced {
  id: string;
  state: string;
  arrivedAt: number;
  firstTokenAt: number | null;
  finishedAt: number | null;
}

/** What the engines' traces of one cell say: each request's time to first token, each engine's peak. */
export interface EngineTraces {
  /** Time to first token on the engine's clock (queue and prefill), by trace id. */
  ttfts: Map<string, number>;
  /** Per engine, the most traced requests it held at once (running and waiting). */
  peaks: number[];
}

/** The most intervals open at once (an interval ends before one that starts at its end). */
function peakOpen(intervals: Array<[number, number]>): number {
  const edges = intervals.flatMap(([from, to]) => [
    [from, 1],
    [to, -1],
  ]);
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let open = 0;
  let peak = 0;
  for (const [, step] of edges) {
    open += step!;
    peak = Math.max(peak, open);
  }
  return peak;
}

/**
 * Each traced request's time to first token on its engine's clock (queue and prefill), from
 * GET /mock/engine/requests; one cut before its first token counts the time it waited there.
 * With `dump`, every traced request (its engine, arrival, admission, first token, prompt and
 * cached tokens) is appended to that file as a JSON line: where a tail's time went.
 */
export async function engineTtfts(urls: string[], dump?: string): Promise<EngineTraces> {
  const ttfts = new Map<string, number>();
  const peaks: number[] = [];
  for (const url of urls) {
    const traced = (await (await fetch(`${url}/mock/engine/requests`)).json()) as Traced[];
    if (dump && traced.length > 0)
      appendFileSync(dump, `${traced.map((t) => JSON.stringify({ engine: url, ...t })).join('\n')}\n`);
    for (const t of traced) {
      if (t.firstTokenAt !== null) ttfts.set(t.id, t.firstTokenAt - t.arrivedAt);
      else if (t.finishedAt !== null && !ttfts.has(t.id)) ttfts.set(t.id, t.finishedAt - t.arrivedAt);
    }
    peaks.push(peakOpen(traced.map((t) => [t.arrivedAt, t.finishedAt ?? Number.POSITIVE_INFINITY])));
  }
  return { ttfts, peaks };
}

export async function lateness(urls: string[]): Promise<Lateness[]> {
  return Promise.all(
    urls.map(async (url) => {
      const stats = (await (await fetch(`${url}/mock/engine`)).json()) as {
        steps: number;
        lateness: { totalMs: number; over5ms: number };
      };
      return { steps: stats.steps, totalMs: stats.lateness.totalMs, over5ms: stats.lateness.over5ms };
    }),
  );
}
