/**
 * The metric names a worker is read with (`workers[].metrics.names`): one engine's, `auto` (the
 * first engine whose names the body holds: vLLM, then SGLang, then llama.cpp), or `none` (never
 * scraped: sluice's own counts).
 */
export type MetricNames = 'auto' | 'vllm' | 'sglang' | 'llamacpp' | 'none';

export const METRIC_NAMES = [
  'auto',
  'vllm',
  'sglang',
  'llamacpp',
  'none',
] as const satisfies readonly MetricNames[];
