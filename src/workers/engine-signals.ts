/**
 * What an engine says of its own load, read from its Prometheus `/metrics` (signal-scraper.ts),
 * one view per worker: the input of load-aware routing. This file imports nothing, so that the
 * dashboard's browser script can be compiled against its types too (see snapshot-types.ts).
 *
 * How a reader should take a reading (`Worker.signals()`):
 * - `fresh`: the engine's own numbers, at most `signals.staleMs` old. Use them.
 * - `missing`: the worker has no usable `/metrics` (404, not Prometheus text, no known metric
 *   names, values that make no sense, a body past `signals.maxBytes`): `signals` holds sluice's
 *   own counts for it instead (`source: 'none'`). Use them as they are.
 * - `stale`: the engine stopped answering `/metrics` in time (it hangs, refuses, fails), or has
 *   not answered yet. Count the worker as saturated, never as idle: an engine too busy to answer
 *   its metrics is the last one to send more work to. `signals` is the last reading, if any, for
 *   display only.
 */

/** Whose metric names a reading came from; `none`: sluice's own counts (no usable `/metrics`). */
export type SignalSource = 'vllm' | 'sglang' | 'llamacpp' | 'none';

export { METRIC_NAMES, type MetricNames } from '../config/metric-names.js';

/** The LoRA adapters of an engine, as vLLM's `vllm:lora_requests_info` reports them. */
export interface LoraSignals {
  /** Adapters of the requests running now (loaded on the engine). */
  readonly running: readonly string[];
  /** Adapters of the requests waiting now (some of them may have to be loaded). */
  readonly waiting: readonly string[];
  /** The most adapters the engine holds at once (`--max-loras`). */
  readonly max: number;
}

/**
 * One engine's load, as it reported it. Where an engine runs several schedulers behind one URL
 * (vLLM's `engine` label under data parallelism, SGLang's `dp_rank`, one series per `model_name`),
 * counts and counters are summed over them and ratios averaged.
 */
export interface EngineSignals {
  /**
   * Requests the engine has accepted but not started: its scheduler's queue (vLLM
   * `vllm:num_requests_waiting`, SGLang `sglang:num_queue_reqs`, llama.cpp
   * `llamacpp:requests_deferred`). With `source: 'none'`: requests waiting in sluice's own queue
   * for this worker. A count, at least 0.
   */
  readonly waiting: number;
  /**
   * Requests being generated now, in the running batch (vLLM `vllm:num_requests_running`, SGLang
   * `sglang:num_running_reqs`, llama.cpp `llamacpp:requests_processing`). With `source: 'none'`:
   * sluice's requests in flight to this worker. A count, at least 0.
   */
  readonly running: number;
  /**
   * The engine's batch as it reports it (SGLang `sglang:max_running_requests`); undefined where
   * it does not (vLLM, llama.cpp: the worker's `maxBatch` says it).
   */
  readonly batchSize?: number | undefined;
  /**
   * Share of the engine's KV-cache capacity held by the requests it runs, 0 (empty) to 1 (full)
   * (vLLM `vllm:kv_cache_usage_perc`, before v0.10 `vllm:gpu_cache_usage_perc`, both 0..1 despite
   * the name; SGLang `sglang:token_usage`; llama.cpp `llamacpp:kv_cache_usage_ratio`, which
   * recent builds no longer export). Undefined when the engine does not say.
   */
  readonly kvCacheUsage: number | undefined;
  /**
   * Prompt tokens found in the engine's prefix cache, a counter since the engine started (vLLM
   * `vllm:prefix_cache_hits[_total]`, SGLang `sglang:cached_tokens_total`). Compare two readings
   * for a rate; it goes back down when the engine restarts. Undefined when the engine does not say.
   */
  readonly prefixCacheHits: number | undefined;
  /**
   * Prompt tokens looked up in the prefix cache, the counter `prefixCacheHits` is a share of
   * (vLLM `vllm:prefix_cache_queries[_total]`, SGLang `sglang:prompt_tokens_total`). Defined
   * exactly when `prefixCacheHits` is.
   */
  readonly prefixCacheQueries: number | undefined;
  /**
   * The hit rate of the prefix cache as the engine computes it, 0..1, for engines that report a
   * rate rather than counters (SGLang `sglang:cache_hit_rate`, a recent window of its own).
   * Undefined when the engine does not say.
   */
  readonly prefixCacheHitRate: number | undefined;
  /** LoRA adapters running and waiting, and the engine's adapter slots; undefined without LoRA. */
  readonly lora: LoraSignals | undefined;
  /** When the reading was taken (ms on the gateway's monotonic clock, performance.now(): a wall-clock step makes no reading stale). */
  readonly scrapedAt: number;
  readonly source: SignalSource;
  /**
   * The gateway replicas' requests on the worker (this one's and the others' as last shared) when
   * the engine was asked: what was sent after it, and so may be missing from the reading, is
   * counted from there (the scorer's view), not from when the answer came back.
   */
  readonly loadWhenAsked?: number | undefined;
}

/** A worker's reading now: see the top of this file for how to take each state. */
export type SignalsReading =
  | { readonly state: 'fresh'; readonly signals: EngineSignals; readonly ageMs: number }
  | { readonly state: 'missing'; readonly signals: EngineSignals; readonly reason: string }
  | {
      readonly state: 'stale';
      /** The last reading, if the engine ever answered: for display, not for routing. */
      readonly signals: EngineSignals | undefined;
      /** Age of that reading; undefined when there is none. */
      readonly ageMs: number | undefined;
      readonly reason: string;
    };

/** A reading as the admin API and the dashboard show it (JSON: nulls, no undefined). */
export interface SignalsSnapshot {
  state: SignalsReading['state'];
  source: SignalSource | null;
  /** Age of the reading in ms; null without one. */
  ageMs: number | null;
  /** Why the reading is stale or missing; null when fresh. */
  reason: string | null;
  waiting: number | null;
  running: number | null;
  kvCacheUsage: number | null;
  prefixCacheHits: number | null;
  prefixCacheQueries: number | null;
  prefixCacheHitRate: number | null;
  lora: { running: string[]; waiting: string[]; max: number } | null;
}

/** The JSON form of a reading. */
export function signalsSnapshot(reading: SignalsReading): SignalsSnapshot {
  const s = reading.signals;
  return {
    state: reading.state,
    source: s?.source ?? null,
    ageMs: reading.state === 'missing' ? 0 : (reading.ageMs ?? null),
    reason: reading.state === 'fresh' ? null : reading.reason,
    waiting: s?.waiting ?? null,
    running: s?.running ?? null,
    kvCacheUsage: s?.kvCacheUsage ?? null,
    prefixCacheHits: s?.prefixCacheHits ?? null,
    prefixCacheQueries: s?.prefixCacheQueries ?? null,
    prefixCacheHitRate: s?.prefixCacheHitRate ?? null,
    lora: s?.lora ? { running: [...s.lora.running], waiting: [...s.lora.waiting], max: s.lora.max } : null,
  };
}
