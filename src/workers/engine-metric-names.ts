import parsePrometheusText, { type PrometheusFamily } from 'parse-prometheus-text-format';
import type { EngineSignals, LoraSignals, MetricNames, SignalSource } from './engine-signals.js';
import type { NewestSeries } from './kept-lines.js';
import { nameFault, RefusedNames } from './reported-names.js';

/**
 * The metric names of each engine, and how a scrape's samples become one EngineSignals: the
 * Prometheus text is parsed by `parse-prometheus-text-format`; this file only knows which family
 * means what, sums or averages over an engine's schedulers, and refuses values that make no sense.
 */

/** A counter's samples are named `<base>_total` by Prometheus clients; some engines write `<base>`. */
interface CounterPair {
  readonly hits: string;
  readonly queries: string;
}

interface Dialect {
  readonly source: Exclude<SignalSource, 'none'>;
  /** Candidate names, the first one present wins (newer names first). */
  readonly waiting: readonly string[];
  readonly running: readonly string[];
  /** The engine's batch size, where it reports it. */
  readonly batchSize: readonly string[];
  readonly kvCacheUsage: readonly string[];
  /** Prefix-cache counters, by base name (`_total` or not); the first pair present wins. */
  readonly prefixCache: readonly CounterPair[];
  readonly prefixCacheHitRate: readonly string[];
  readonly lora: string | undefined;
}

const DIALECTS: readonly Dialect[] = [
  {
    source: 'vllm',
    waiting: ['vllm:num_requests_waiting'],
    running: ['vllm:num_requests_running'],
    batchSize: [],
    // Renamed in vLLM 0.10; both are 0..1.
    kvCacheUsage: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
    prefixCache: [
      { hits: 'vllm:prefix_cache_hits', queries: 'vllm:prefix_cache_queries' },
      // vLLM V1 before the `gpu_` prefix was dropped.
      { hits: 'vllm:gpu_prefix_cache_hits', queries: 'vllm:gpu_prefix_cache_queries' },
    ],
    // vLLM V0 reported a rate.
    prefixCacheHitRate: ['vllm:gpu_prefix_cache_hit_rate'],
    lora: 'vllm:lora_requests_info',
  },
  {
    source: 'sglang',
    waiting: ['sglang:num_queue_reqs'],
    running: ['sglang:num_running_reqs'],
    batchSize: ['sglang:max_running_requests'],
    kvCacheUsage: ['sglang:token_usage'],
    // Cached prompt tokens (every `cache_source`) out of all prompt tokens.
    prefixCache: [{ hits: 'sglang:cached_tokens', queries: 'sglang:prompt_tokens' }],
    prefixCacheHitRate: ['sglang:cache_hit_rate'],
    lora: undefined,
  },
  {
    source: 'llamacpp',
    // llama-server started with --metrics: slots busy, and tasks deferred for want of a slot.
    waiting: ['llamacpp:requests_deferred'],
    running: ['llamacpp:requests_processing'],
    batchSize: [],
    // Dropped by recent llama.cpp builds: then the KV-cache use is unknown.
    kvCacheUsage: ['llamacpp:kv_cache_usage_ratio'],
    prefixCache: [],
    prefixCacheHitRate: [],
    lora: undefined,
  },
];

/** More requests than this on one engine is not a report, it is a broken exporter. */
const MAX_REQUESTS = 1_000_000;
/** Most LoRA adapter slots believed. */
const MAX_LORA = 100_000;
/**
 * Most adapter names read of one reading's running, and of its waiting, adapters (the first ones,
 * in the exporter's order): the rest are not read. What the gateway learns of them is bounded
 * again per worker (`signals.maxAdapters`).
 */
export const MAX_ADAPTERS_READ = 4096;
/** A ratio a little past 1 is rounding (a full cache); more is not a ratio. */
const RATIO_SLACK = 0.01;

function dialectsFor(names: Exclude<MetricNames, 'none'>): readonly Dialect[] {
  return names === 'auto' ? DIALECTS : DIALECTS.filter((d) => d.source === names);
}

/** The labels of vLLM's LoRA gauge that are its state; the others name the scheduler it is of. */
const LORA_STATE_LABELS: ReadonlySet<string> = new Set([
  'max_lora',
  'running_lora_adapters',
  'waiting_lora_adapters',
]);

/**
 * The families of which a reading takes only the newest series of each scheduler (vLLM's LoRA
 * gauge): the scraper keeps no other line of them (kept-lines.ts).
 */
export function newestSeriesOf(names: Exclude<MetricNames, 'none'>): NewestSeries {
  const families = new Set<string>();
  for (const d of dialectsFor(names)) if (d.lora) families.add(d.lora);
  return { families, stateLabels: LORA_STATE_LABELS };
}

/** Every metric name read for `names`: the scraper keeps the lines of these families only. */
export function wantedMetricNames(names: Exclude<MetricNames, 'none'>): ReadonlySet<string> {
  const wanted = new Set<string>();
  for (const d of dialectsFor(names)) {
    for (const name of [
      ...d.waiting,
      ...d.running,
      ...d.batchSize,
      ...d.kvCacheUsage,
      ...d.prefixCacheHitRate,
    ])
      wanted.add(name);
    for (const pair of d.prefixCache) {
      for (const base of [pair.hits, pair.queries]) {
        wanted.add(base);
        wanted.add(`${base}_total`);
      }
    }
    if (d.lora) wanted.add(d.lora);
  }
  return wanted;
}

export interface Sample {
  readonly value: number;
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * Parses Prometheus text with the library into samples by metric name (families of one name
 * that appear twice are merged). Throws on text that is not Prometheus text.
 */
export function parseSamples(text: string): Map<string, Sample[]> {
  // The parser drops the last sample of a text that does not end its last line.
  const families: PrometheusFamily[] = parsePrometheusText(text.endsWith('\n') ? text : `${text}\n`);
  const byName = new Map<string, Sample[]>();
  for (const family of families) {
    let list = byName.get(family.name);
    if (!list) {
      list = [];
      byName.set(family.name, list);
    }
    for (const sample of family.metrics) {
      // `Number('')` is 0: an empty value is no value.
      const raw = sample.value?.trim() ?? '';
      list.push({ value: raw === '' ? Number.NaN : Number(raw), labels: sample.labels ?? {} });
    }
  }
  return byName;
}

export type SignalsParse =
  | {
      readonly ok: true;
      readonly signals: EngineSignals;
      /** Adapter names refused by the rule of reported-names.ts, if any. */
      readonly refused?: RefusedNames | undefined;
    }
  | { readonly ok: false; readonly reason: 'no_known_metrics' | 'invalid_values'; readonly message: string };

class InvalidValue extends Error {}

function present(samples: Map<string, Sample[]>, names: readonly string[]): [string, Sample[]] | undefined {
  for (const name of names) {
    const list = samples.get(name);
    if (list && list.length > 0) return [name, list];
  }
  return undefined;
}

/** The sum of a count over the engine's schedulers (`engine`, `dp_rank`, `model_name` ...). */
function count(name: string, list: readonly Sample[]): number {
  let sum = 0;
  for (const { value } of list) {
    if (!Number.isFinite(value) || value < 0 || value > MAX_REQUESTS)
      throw new InvalidValue(`${name} is ${value}, not a count of requests`);
    sum += value;
  }
  if (sum > MAX_REQUESTS) throw new InvalidValue(`${name} adds up to ${sum}, not a count of requests`);
  return sum;
}

/** The mean of a 0..1 ratio over the engine's schedulers; `NaN` is refused unless `nanIsNone`. */
function ratio(name: string, list: readonly Sample[], nanIsNone = false): number | undefined {
  let sum = 0;
  let n = 0;
  for (const { value } of list) {
    if (Number.isNaN(value) && nanIsNone) continue;
    if (!Number.isFinite(value) || value < 0 || value > 1 + RATIO_SLACK)
      throw new InvalidValue(`${name} is ${value}, not a ratio from 0 to 1`);
    sum += Math.min(1, value);
    n++;
  }
  return n === 0 ? undefined : sum / n;
}

function counter(name: string, list: readonly Sample[]): number {
  let sum = 0;
  for (const { value } of list) {
    if (!Number.isFinite(value) || value < 0) throw new InvalidValue(`${name} is ${value}, not a counter`);
    sum += value;
  }
  if (sum > Number.MAX_SAFE_INTEGER) throw new InvalidValue(`${name} adds up to ${sum}, not a counter`);
  return sum;
}

function counterNamed(samples: Map<string, Sample[]>, base: string): [string, Sample[]] | undefined {
  return present(samples, [`${base}_total`, base]);
}

function prefixCounters(
  samples: Map<string, Sample[]>,
  pairs: readonly CounterPair[],
): { hits: number; queries: number } | undefined {
  for (const pair of pairs) {
    const hits = counterNamed(samples, pair.hits);
    const queries = counterNamed(samples, pair.queries);
    if (!hits || !queries) continue;
    const h = counter(...hits);
    const q = counter(...queries);
    if (h > q) throw new InvalidValue(`${hits[0]} (${h}) is more than ${queries[0]} (${q})`);
    return { hits: h, queries: q };
  }
  return undefined;
}

/** The names a reading's adapters are gathered into: distinct, screened, at most MAX_ADAPTERS_READ. */
class AdapterNames {
  readonly names = new Set<string>();
  constructor(private readonly refused: RefusedNames) {}

  /** Adds the names of a label (`a,b,c`). */
  add(text: string | undefined): void {
    if (!text) return;
    let start = 0;
    while (start <= text.length && this.names.size < MAX_ADAPTERS_READ) {
      let end = text.indexOf(',', start);
      if (end < 0) end = text.length;
      const name = text.slice(start, end).trim();
      start = end + 1;
      if (name.length === 0 || this.names.has(name)) continue;
      const fault = nameFault(name);
      if (fault === undefined) this.names.add(name);
      else this.refused.note(name, fault);
    }
  }
}

/**
 * vLLM's LoRA gauge: one series per combination of adapters it has seen, its value the time that
 * combination was last current. Per scheduler (the labels besides the adapters), the latest
 * series is the present; over schedulers the adapters are joined and the slots the largest.
 */
function lora(name: string, list: readonly Sample[], refused: RefusedNames): LoraSignals | undefined {
  const latest = new Map<string, Sample>();
  for (const sample of list) {
    if (!Number.isFinite(sample.value)) throw new InvalidValue(`${name} is ${sample.value}, not a time`);
    const rest = Object.entries(sample.labels).filter(([label]) => !LORA_STATE_LABELS.has(label));
    const key = JSON.stringify(rest.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    const seen = latest.get(key);
    if (!seen || sample.value >= seen.value) latest.set(key, sample);
  }
  if (latest.size === 0) return undefined;
  const running = new AdapterNames(refused);
  const waiting = new AdapterNames(refused);
  let max = 0;
  for (const { labels } of latest.values()) {
    const slots = Number(labels.max_lora ?? '');
    if (!Number.isInteger(slots) || slots < 0 || slots > MAX_LORA)
      throw new InvalidValue(`${name} has max_lora="${labels.max_lora ?? ''}", not a number of adapters`);
    max = Math.max(max, slots);
    running.add(labels.running_lora_adapters);
    waiting.add(labels.waiting_lora_adapters);
  }
  return { running: [...running.names], waiting: [...waiting.names], max };
}

/**
 * One engine's signals from a scrape's samples, read with the names of `names` (`auto`: the
 * first engine whose request counts are present). Values that are not numbers, negative, or
 * absurd make the whole reading invalid: an exporter that lies about one value is not believed
 * about the others.
 */
export function readEngineSignals(
  samples: Map<string, Sample[]>,
  names: Exclude<MetricNames, 'none'>,
  scrapedAt: number,
): SignalsParse {
  const dialect = dialectsFor(names).find(
    (d) => present(samples, d.waiting) !== undefined || present(samples, d.running) !== undefined,
  );
  if (!dialect) {
    const expected = names === 'auto' ? 'vLLM, SGLang or llama.cpp' : names;
    return { ok: false, reason: 'no_known_metrics', message: `no request counts of ${expected} in /metrics` };
  }
  const waiting = present(samples, dialect.waiting);
  const running = present(samples, dialect.running);
  if (!waiting || !running) {
    const lacking = waiting ? dialect.running[0] : dialect.waiting[0];
    return { ok: false, reason: 'no_known_metrics', message: `/metrics lacks ${lacking}` };
  }
  try {
    const kv = present(samples, dialect.kvCacheUsage);
    const batch = present(samples, dialect.batchSize);
    const rate = present(samples, dialect.prefixCacheHitRate);
    const cache = prefixCounters(samples, dialect.prefixCache);
    const loraSamples = dialect.lora === undefined ? undefined : samples.get(dialect.lora);
    const refused = new RefusedNames();
    const adapters = loraSamples && dialect.lora ? lora(dialect.lora, loraSamples, refused) : undefined;
    return {
      ok: true,
      refused: refused.count > 0 ? refused : undefined,
      signals: {
        waiting: count(...waiting),
        running: count(...running),
        // A batch of none is no batch: not believed.
        batchSize: batch && (count(...batch) || undefined),
        kvCacheUsage: kv && ratio(...kv),
        prefixCacheHits: cache?.hits,
        prefixCacheQueries: cache?.queries,
        // A rate over no query yet is NaN, honestly: no rate.
        prefixCacheHitRate: rate && ratio(rate[0], rate[1], true),
        lora: adapters,
        scrapedAt,
        source: dialect.source,
      },
    };
  } catch (err) {
    if (err instanceof InvalidValue) return { ok: false, reason: 'invalid_values', message: err.message };
    throw err;
  }
}
