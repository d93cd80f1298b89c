import { Counter, Gauge, Registry } from 'prom-client';

/** What the embedded engine knows of its load at one moment. */
export interface EngineLoad {
  /** Requests waiting for a slot. */
  waiting: number;
  /** Requests holding a slot (generating). */
  running: number;
  /** Share of the KV cells held by the running requests, 0..1. */
  kvCacheUsage: number;
  /** Prompt tokens looked up in the prefix cache, since the engine started. */
  prefixCacheQueries: number;
  /** Of those, tokens found in it. */
  prefixCacheHits: number;
}

/**
 * The `/metrics` of `sluice worker`, under vLLM's names and labels (`model_name`), so that a
 * gateway reads a fleet of sluice workers as it reads vLLM engines. Every value is read from the
 * engine when scraped: nothing is estimated. Rendered by prom-client, on a registry of its own.
 */
export class EngineMetrics {
  private readonly registry = new Registry();

  constructor(modelName: string, read: () => EngineLoad) {
    const labels = { model_name: modelName };
    const gauge = (name: string, help: string, value: (load: EngineLoad) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['model_name'] as const,
        registers: [this.registry],
        collect() {
          this.set(labels, value(read()));
        },
      });
    const counter = (name: string, help: string, value: (load: EngineLoad) => number) =>
      new Counter({
        name,
        help,
        labelNames: ['model_name'] as const,
        registers: [this.registry],
        collect() {
          // The engine keeps the count; the series shows it as it is.
          this.reset();
          this.inc(labels, value(read()));
        },
      });
    gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', (l) => l.running);
    gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', (l) => l.waiting);
    gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', (l) => l.kvCacheUsage);
    counter(
      'vllm:prefix_cache_queries_total',
      'Prefix cache queries, in terms of number of queried tokens.',
      (l) => l.prefixCacheQueries,
    );
    counter(
      'vllm:prefix_cache_hits_total',
      'Prefix cache hits, in terms of number of cached tokens.',
      (l) => l.prefixCacheHits,
    );
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }
}
