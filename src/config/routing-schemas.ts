import { z } from 'zod';
import { AFFINITY_DEFAULTS } from '../routing/affinity-index.js';
import { SCORER_DEFAULTS } from '../routing/scorer.js';

/** The settings of the scorer policy (`routing.scorer`, `models.<m>.routing.scorer`) and of flow control (`flow`). */

const positiveInt = z.number().int().positive();
const nonNegativeInt = z.number().int().nonnegative();

/** The fields of `o` whose value is not undefined (zod keeps unset optional keys as undefined). */
function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** A scorer's weight: how much its 0..1 score counts in a worker's total (0: not at all). */
const weight = z.number().min(0).max(1000);

/** The scorer policy's weights (README "Scorer routing"), each optional: unset ones keep the default. */
const scorerWeightsSchema = z.strictObject({
  /** The share of the prompt's blocks last sent to the worker (its engine's prefix cache). */
  prefix: weight.optional(),
  /** Fewer requests waiting on its engine. */
  queue: weight.optional(),
  /** More of its engine's KV cache free. */
  kvCache: weight.optional(),
  /** The LoRA adapter asked for is loaded on its engine. */
  lora: weight.optional(),
  /** Fewer of this gateway's own requests in flight to it. */
  inflight: weight.optional(),
  /** Less prefill work ahead on it: this gateway's prompts not yet answering there, plus this prompt's part its cache lacks. */
  prefill: weight.optional(),
});

/** When a worker is saturated: the scorer leaves it out, and with every worker saturated requests wait in the gateway. */
const saturationSchema = z.strictObject({
  /** More requests waiting on its engine than this (with what the gateway sent since the engine was read). */
  maxWaiting: nonNegativeInt.optional(),
  /** Its engine's KV cache fuller than this share (0..1). */
  maxKvCacheUsage: z.number().min(0).max(1).optional(),
  /** An engine's batch when neither it nor the worker's `maxBatch` says, until one is learnt. */
  defaultBatch: z.number().int().positive().optional(),
});

/** While one tenant is heavy (flow.heavyShare): how the scorer keeps its long prompts from the workers the others need. */
const heavyTenantSchema = z.strictObject({
  /** Whether it does so at all. */
  isolate: z.boolean().optional(),
  /** The share of the workers a heavy tenant's long prompts may be pending prefill on at once (at least one). */
  prefillShare: z.number().gt(0).max(1).optional(),
  /** A worker with more characters pending prefill than this is prefilling a long prompt. */
  longPrefillChars: nonNegativeInt.optional(),
  /** With more than 0: the heavy tenant's workers taken in turn, one more every this many ms (0: any). */
  turnMs: nonNegativeInt.optional(),
});

/** What a model may set of the scorer: its weights and saturation, over `routing.scorer`'s. */
export const modelScorerSchema = z.strictObject({
  weights: scorerWeightsSchema.optional(),
  saturation: saturationSchema.optional(),
  heavy: heavyTenantSchema.optional(),
});

/** `routing.scorer`: the weights and saturation of every model without its own, and prefix affinity. */
export const scorerSchema = z
  .strictObject({
    weights: scorerWeightsSchema
      .prefault({})
      .transform((w) => ({ ...SCORER_DEFAULTS.weights, ...definedOnly(w) })),
    saturation: saturationSchema
      .prefault({})
      .transform((s) => ({ ...SCORER_DEFAULTS.saturation, ...definedOnly(s) })),
    heavy: heavyTenantSchema.prefault({}).transform((h) => ({ ...SCORER_DEFAULTS.heavy, ...definedOnly(h) })),
    /** Prefix affinity: which workers were last sent which prompt blocks (shared by replicas through Redis). */
    affinity: z
      .strictObject({
        /** Characters per block of a prompt. */
        blockChars: positiveInt.default(AFFINITY_DEFAULTS.blockChars),
        /** Blocks hashed per prompt, from its start. */
        maxBlocks: positiveInt.default(AFFINITY_DEFAULTS.maxBlocks),
        /** Block hashes kept, least recently used dropped past it. */
        maxEntries: positiveInt.default(AFFINITY_DEFAULTS.maxEntries),
        /** How long a block hash is kept after it was last routed. */
        ttlMs: positiveInt.default(AFFINITY_DEFAULTS.ttlMs),
        /** With `redis.url`: each replica's decisions are sent to the others (a Redis stream). */
        share: z.boolean().default(true),
        /** Decisions kept in the Redis stream, read by a replica that starts. */
        streamLength: positiveInt.default(20_000),
      })
      .prefault({}),
    /**
     * With `redis.url`: how often a replica publishes its requests and pending prefill per worker
     * to the others (when they changed), which the scorer adds to its own; 0: not shared. Every
     * 10 ms: with four replicas on the routing benchmark, 50 ms left chat's TTFT p90 20% above one
     * replica's (each replica sent to an engine the others had just filled); 10 ms matched it.
     */
    loadShareMs: nonNegativeInt.default(10),
  })
  .prefault({});

/**
 * `flow`: when every worker of a model routed by the scorer is saturated, its requests wait in the
 * gateway, by priority class, fair between tenants within a class, each until its own queue deadline.
 */
export const flowSchema = z
  .strictObject({
    enabled: z.boolean().default(true),
    /** Priority classes, highest first. */
    classes: z
      .array(z.string().regex(/^[a-z][a-z0-9_-]*$/, 'a lower-case name'))
      .min(1)
      .max(16)
      .default(['high', 'normal', 'low']),
    /** The class of a request whose key has none (and of every request without keys). */
    defaultClass: z.string().default('normal'),
    /** Per API key (its id `key_…` or its name): the highest class its requests may have, their default. */
    keys: z.record(z.string().min(1), z.strictObject({ priority: z.string() })).default({}),
    /** The header a request may lower its class with (a higher one than its key's is lowered to its key's). */
    priorityHeader: z.string().min(1).default('x-sluice-priority'),
    /** The header a request may shorten its queue deadline with, in ms. */
    maxWaitHeader: z.string().min(1).default('x-sluice-max-wait-ms'),
    /**
     * Without API keys: the header that names a request's tenant (fairness is between tenants).
     * With keys the tenant is the key, and this header is not read.
     */
    tenantHeader: z.string().min(1).optional(),
    /** A request's queue deadline, unless its class sets another or its header a shorter one. */
    maxWaitMs: positiveInt.default(30_000),
    /** Per class: its queue deadline. */
    classMaxWaitMs: z.record(z.string(), positiveInt).default({}),
    /** Requests waiting per model at most; past it a request is refused at once. */
    maxQueued: positiveInt.default(10_000),
    /**
     * In engines that schedule by priority (a worker's `schedulingPolicy: priority`): a tenant with
     * more than this many times the mean of the other tenants' requests in flight is heavy, and its
     * requests go behind the others' of their class in the engine's queue.
     */
    heavyShare: z.number().min(1).default(4),
    /** How often a waiting queue looks at the workers again (besides when a request ends). */
    pollMs: positiveInt.default(25),
    /** With `redis.url`: how often a replica publishes its tenants' requests in flight and its queues, and reads the others'. */
    shareIntervalMs: positiveInt.default(250),
  })
  .prefault({})
  .superRefine((f, ctx) => {
    const known = new Set(f.classes);
    if (known.size !== f.classes.length)
      ctx.addIssue({ code: 'custom', message: 'flow.classes has a class twice', path: ['classes'] });
    if (!known.has(f.defaultClass))
      ctx.addIssue({
        code: 'custom',
        message: `flow.defaultClass '${f.defaultClass}' is not one of flow.classes (${f.classes.join(', ')})`,
        path: ['defaultClass'],
      });
    for (const [key, { priority }] of Object.entries(f.keys))
      if (!known.has(priority))
        ctx.addIssue({
          code: 'custom',
          message: `flow.keys.${key}.priority '${priority}' is not one of flow.classes`,
          path: ['keys', key, 'priority'],
        });
    for (const name of Object.keys(f.classMaxWaitMs))
      if (!known.has(name))
        ctx.addIssue({
          code: 'custom',
          message: `flow.classMaxWaitMs.${name} is not one of flow.classes`,
          path: ['classMaxWaitMs', name],
        });
  });
