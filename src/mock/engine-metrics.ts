import type { EngineModel } from './engine-model.js';

/**
 * The engine model's `GET /metrics`, in the Prometheus text format and with the names vLLM's V1
 * engine uses (labels `engine="0"` and `model_name`, the first model served):
 *
 * - `vllm:num_requests_running`, `vllm:num_requests_waiting` (gauges);
 * - `vllm:kv_cache_usage_perc` (gauge, a fraction from 0 to 1 despite its name);
 * - `vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total` (counters of prompt tokens
 *   looked up, and found, in the prefix cache), `vllm:prompt_tokens_total`,
 *   `vllm:generation_tokens_total`, `vllm:num_preemptions_total` (always 0 here: a request
 *   takes all its blocks when admitted), `vllm:request_success_total{finished_reason}`; each
 *   counter with its `_created` series, as prometheus_client writes them;
 * - `vllm:cache_config_info{block_size,num_gpu_blocks,enable_prefix_caching}` (value 1);
 * - with LoRA adapters, `vllm:lora_requests_info{running_lora_adapters,waiting_lora_adapters,max_lora}`:
 *   one series per combination of labels ever seen (the most recent 32), valued the wall-clock
 *   time in seconds it was last seen, as vLLM's gauge keeps them: a reader takes the newest.
 */
export class EngineMetrics {
  private readonly created: number;
  private readonly lora = new Map<string, number>();

  constructor(
    private readonly engine: EngineModel,
    private readonly modelName: string,
    /** Wall-clock time in ms (for `_created` and the LoRA gauge). */
    private readonly wallNow: () => number = Date.now,
  ) {
    this.created = wallNow() / 1000;
  }

  render(): string {
    const e = this.engine;
    const s = e.stats;
    const labels = `engine="0",model_name=${quote(this.modelName)}`;
    const out: string[] = [];
    const gauge = (name: string, help: string, value: number) => {
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name}{${labels}} ${float(value)}`);
    };
    const counter = (name: string, help: string, series: [string, number][]) => {
      out.push(`# HELP ${name}_total ${help}`, `# TYPE ${name}_total counter`);
      for (const [extra, value] of series) out.push(`${name}_total{${labels}${extra}} ${float(value)}`);
      out.push(`# HELP ${name}_created ${help}`, `# TYPE ${name}_created gauge`);
      for (const [extra] of series) out.push(`${name}_created{${labels}${extra}} ${float(this.created)}`);
    };
    gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', e.numRunning);
    gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', e.numWaiting);
    gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', e.kvUsage);
    counter('vllm:prefix_cache_queries', 'Prefix cache queries, in terms of number of queried tokens.', [
      ['', s.prefixQueries],
    ]);
    counter('vllm:prefix_cache_hits', 'Prefix cache hits, in terms of number of cached tokens.', [
      ['', s.prefixHits],
    ]);
    counter('vllm:prompt_tokens', 'Number of prefill tokens processed.', [['', s.prefixQueries]]);
    counter('vllm:generation_tokens', 'Number of generation tokens processed.', [['', s.generationTokens]]);
    counter('vllm:num_preemptions', 'Cumulative number of preemption from the engine.', [['', 0]]);
    counter(
      'vllm:request_success',
      'Count of successfully processed requests.',
      (['stop', 'length', 'abort'] as const).map((reason) => [
        `,finished_reason="${reason}"`,
        s.finishedBy[reason],
      ]),
    );
    const o = e.options;
    out.push(
      '# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig',
      '# TYPE vllm:cache_config_info gauge',
      `vllm:cache_config_info{block_size="${o.blockSize}",enable_prefix_caching="${o.prefixCaching ? 'True' : 'False'}",engine="0",num_gpu_blocks="${o.cacheBlocks}"} 1.0`,
    );
    if (o.adapters.length > 0) {
      const { running, waiting } = e.loraState();
      const key = `max_lora="${o.maxLoras}",running_lora_adapters=${quote(running.join(','))},waiting_lora_adapters=${quote(waiting.join(','))}`;
      this.lora.delete(key);
      this.lora.set(key, this.wallNow() / 1000);
      if (this.lora.size > 32) this.lora.delete(this.lora.keys().next().value!);
      out.push(
        '# HELP vllm:lora_requests_info Running stats on lora requests.',
        '# TYPE vllm:lora_requests_info gauge',
      );
      for (const [k, time] of this.lora) out.push(`vllm:lora_requests_info{${k}} ${float(time)}`);
    }
    return `${out.join('\n')}\n`;
  }
}

/** A label value, quoted and escaped. */
function quote(value: string): string {
  return `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

/** As Python writes a float: `3.0`, `0.25`. */
function float(value: number): string {
  return Number.isInteger(value) && Math.abs(value) < 1e16 ? value.toFixed(1) : String(value);
}
