/**
 * The knobs of the mock's engine model (engine-model.ts), with vLLM's name for each where it has
 * one. Time is the model's: a step's duration is computed from them, never measured.
 */
export interface EngineOptions {
  /** Sequences in one batch at most (vLLM `--max-num-seqs`). Default 32. */
  maxBatch?: number | undefined;
  /** Tokens one step may compute, decode and prefill chunks together (vLLM `--max-num-batched-tokens`). Default 2048. */
  maxBatchedTokens?: number | undefined;
  /** Tokens per KV-cache block (vLLM `--block-size`). Default 16. */
  blockSize?: number | undefined;
  /** KV-cache capacity in blocks (vLLM `--num-gpu-blocks-override`). Default 4096 (65,536 tokens). */
  cacheBlocks?: number | undefined;
  /** Automatic prefix caching (vLLM `--enable-prefix-caching`, on by default in V1). Default true. */
  prefixCaching?: boolean | undefined;
  /** Prompt tokens computed per second of a step (prefill speed). Default 8000. */
  prefillTokensPerSecond?: number | undefined;
  /** Tokens per second of one sequence decoding alone (1000 / this = a step of a batch of one, in ms). Default 50. */
  decodeTokensPerSecond?: number | undefined;
  /** A step of a batch of b sequences lasts (1 + batchSlowdown × (b − 1)) times a step of one. Default 0.02. */
  batchSlowdown?: number | undefined;
  /** LoRA adapters served (vLLM `--lora-modules`), requested by name as the model. Default none. */
  adapters?: readonly string[] | undefined;
  /** Adapters in one batch at most (vLLM `--max-loras`). Default 1. */
  maxLoras?: number | undefined;
  /** Added to the step in which an adapter not in a GPU slot is loaded into one. Default 20. */
  loraLoadMs?: number | undefined;
  /**
   * The order waiting requests are admitted in (vLLM `--scheduling-policy`): `fcfs`, by arrival;
   * `priority`, by each request's `priority` (lower first), then by arrival. Under `fcfs` a
   * request with a non-zero priority is refused, as vLLM refuses it. Default fcfs.
   */
  schedulingPolicy?: 'fcfs' | 'priority' | undefined;
  /** Each step's duration is scaled by a uniform factor in [1 − jitter, 1 + jitter], from the seeded PRNG. Default 0. */
  jitter?: number | undefined;
  /** Seed of the PRNG (the jitter). Default 0. */
  seed?: number | undefined;
}

export type ResolvedEngineOptions = Required<{ [K in keyof EngineOptions]: NonNullable<EngineOptions[K]> }>;

export const ENGINE_DEFAULTS: ResolvedEngineOptions = Object.freeze({
  maxBatch: 32,
  maxBatchedTokens: 2048,
  blockSize: 16,
  cacheBlocks: 4096,
  prefixCaching: true,
  prefillTokensPerSecond: 8000,
  decodeTokensPerSecond: 50,
  batchSlowdown: 0.02,
  adapters: Object.freeze([]) as readonly string[],
  maxLoras: 1,
  loraLoadMs: 20,
  schedulingPolicy: 'fcfs',
  jitter: 0,
  seed: 0,
});

function integer(name: string, value: number, min: number): number {
  if (!Number.isInteger(value) || value < min)
    throw new Error(`engine.${name} must be an integer >= ${min}, got ${value}`);
  return value;
}

function number(
  name: string,
  value: number,
  min: number,
  max = Number.POSITIVE_INFINITY,
  open = false,
): number {
  if (!Number.isFinite(value) || value < min || value > max || (open && value === min)) {
    throw new Error(
      `engine.${name} must be a number ${open ? '>' : '>='} ${min}${max < Infinity ? ` and <= ${max}` : ''}, got ${value}`,
    );
  }
  return value;
}

function policy(value: string): 'fcfs' | 'priority' {
  if (value !== 'fcfs' && value !== 'priority')
    throw new Error(`engine.schedulingPolicy must be fcfs or priority, got ${JSON.stringify(value)}`);
  return value;
}

/** The options with their defaults; throws an Error naming the first invalid one. */
export function resolveEngineOptions(options: EngineOptions): ResolvedEngineOptions {
  const o = { ...ENGINE_DEFAULTS };
  for (const [key, value] of Object.entries(options)) {
    if (value !== undefined) (o as Record<string, unknown>)[key] = value;
  }
  const adapters = [...o.adapters];
  for (const name of adapters) {
    if (typeof name !== 'string' || name === '' || /[\s,]/.test(name)) {
      throw new Error(
        `engine.adapters: an adapter name must be a non-empty string without spaces or commas, got ${JSON.stringify(name)}`,
      );
    }
  }
  if (new Set(adapters).size !== adapters.length) throw new Error('engine.adapters: names must be distinct');
  const resolved: ResolvedEngineOptions = {
    maxBatch: integer('maxBatch', o.maxBatch, 1),
    maxBatchedTokens: integer('maxBatchedTokens', o.maxBatchedTokens, 1),
    blockSize: integer('blockSize', o.blockSize, 1),
    cacheBlocks: integer('cacheBlocks', o.cacheBlocks, 1),
    prefixCaching: o.prefixCaching,
    prefillTokensPerSecond: number('prefillTokensPerSecond', o.prefillTokensPerSecond, 0, Infinity, true),
    decodeTokensPerSecond: number('decodeTokensPerSecond', o.decodeTokensPerSecond, 0, Infinity, true),
    batchSlowdown: number('batchSlowdown', o.batchSlowdown, 0),
    adapters,
    maxLoras: integer('maxLoras', o.maxLoras, 1),
    loraLoadMs: number('loraLoadMs', o.loraLoadMs, 0),
    schedulingPolicy: policy(o.schedulingPolicy),
    jitter: number('jitter', o.jitter, 0, 0.9),
    seed: integer('seed', o.seed, 0),
  };
  if (resolved.maxBatchedTokens < resolved.maxBatch) {
    throw new Error(
      `engine.maxBatchedTokens (${resolved.maxBatchedTokens}) must be >= engine.maxBatch (${resolved.maxBatch}): every sequence of a full batch decodes a token per step`,
    );
  }
  return resolved;
}
