import type { AffinityIndex } from './affinity-index.js';

/**
 * Routing policies are small and pure: given the candidate workers (already filtered to the
 * healthy, admitting workers of one model) and what is known of the request, pick one.
 * Randomness is injected so that tests can make distributions reproducible.
 */
export const POLICY_NAMES = [
  'round_robin',
  'random',
  'least_outstanding',
  'power_of_two',
  'cache_aware',
  'consistent_hash',
  'scorer',
] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

/**
 * What a candidate's engine reports of its load: structurally `Worker.signals()` (the states and
 * fields of src/workers/engine-signals.ts that routing reads; routing imports nothing of workers).
 * `fresh`: the engine's numbers; `missing`: sluice's own counts; `stale`: count it as saturated.
 */
export interface CandidateReading {
  readonly state: 'fresh' | 'stale' | 'missing';
  readonly signals:
    | {
        readonly waiting: number;
        readonly running: number;
        /** The engine's batch as it reports it. */
        readonly batchSize?: number | undefined;
        readonly kvCacheUsage: number | undefined;
        readonly lora:
          | { readonly running: readonly string[]; readonly waiting: readonly string[]; readonly max: number }
          | undefined;
        /** When the engine was read (the monotonic clock, ms). */
        readonly scrapedAt: number;
        /** The replicas' requests on it (`loadOf`) when it was asked: what was sent since counts from there. */
        readonly loadWhenAsked?: number | undefined;
      }
    | undefined;
}

export interface Candidate {
  /** Stable worker id (the same worker keeps it across calls). */
  readonly id: string;
  /** Requests in flight plus queued on this worker right now. */
  readonly load: number;
  /**
   * Characters of the prompts this gateway sent it that have not had their first token yet (the
   * part its engine's prefix cache likely lacked): prefill work queued ahead of the next request.
   */
  readonly pendingPrefill?: number;
  /**
   * What the other gateway replicas have on it (their `load` and `pendingPrefill`, shared through
   * Redis, at most a share interval old; src/replicas/load-share.ts): the scorer adds it to this
   * gateway's own.
   */
  readonly elsewhere?: { readonly load: number; readonly pendingPrefill: number };
  /** Its engine's batch as configured (the worker's `maxBatch`). */
  readonly maxBatch?: number | undefined;
  /** Its engine's load now (the scorer reads it; a candidate without it is read from `load`). */
  signals?(now?: number): CandidateReading;
  /** The LoRA adapters it lists on `/v1/models`, to the base model of each. */
  readonly adapters?: ReadonlyMap<string, string>;
}

export interface RouteContext {
  /** The prompt as text, for prefix matching (cache_aware, scorer). */
  readonly text?: string | undefined;
  /** A session key, for consistent_hash (from a header such as X-Session-Id). */
  readonly hashKey?: string | undefined;
  /** The model asked for (the Router sets it): a LoRA adapter's name when it is one. */
  readonly model?: string | undefined;
  /**
   * Set while one tenant of the model is heavy (flow control): whether this request is that
   * tenant's or another's. The scorer then keeps the heavy tenant's long prompts from the workers
   * the others need (ScorerOptions.heavy).
   */
  readonly tenantWeight?: 'heavy' | 'light' | undefined;
  /**
   * With `tenantWeight`: the ids of every worker of the model, in id order. A heavy tenant's
   * turn (ScorerOptions.heavy.turnMs) is taken from this one set, whichever candidates a pick
   * has (a worker without a free slot, a retry's exclusions), so the hold and the pick, and every
   * replica, agree on it.
   */
  readonly fleet?: readonly string[] | undefined;
}

/** Why a decision went the way it did (the scorer's; see scorer.ts). */
export interface RoutingExplanation {
  /** The scorer whose weighted score set the winner apart, or how it was chosen otherwise. */
  readonly decidedBy: string;
  /** Candidates left out, by filter (`saturated`, `lora`). */
  readonly filtered: Readonly<Record<string, number>>;
  /** The characters of the prompt the winner's engine likely has to compute (its prefix cache lacks them). */
  readonly prefillChars?: number;
  /** The best candidates' weighted scores (total and by scorer), best first. */
  readonly scores: readonly {
    readonly id: string;
    readonly total: number;
    readonly by: Readonly<Record<string, number>>;
  }[];
}

export interface RoutingPolicy {
  readonly name: PolicyName;
  /** Picks one of `candidates` (never empty). Returns the chosen candidate. */
  select(candidates: readonly Candidate[], ctx: RouteContext): Candidate;
  /** A worker left the pool for good: forget what is kept about it. */
  removeWorker?(workerId: string): void;
  /**
   * Whether every one of `candidates` is saturated now (policies that judge saturation: the
   * scorer): a request then waits in the gateway (flow control) rather than in an engine.
   */
  saturated?(candidates: readonly Candidate[], ctx: RouteContext): boolean;
  /** Why the last `select` chose what it chose (policies that explain themselves). */
  readonly lastExplanation?: RoutingExplanation | undefined;
}

export type RandomSource = () => number;

export interface CacheAwareOptions {
  /** Route by prefix only when matched/total characters is above this ratio. */
  readonly matchThreshold: number;
  /** Use least-loaded regardless when max load - min load exceeds this... */
  readonly balanceAbsThreshold: number;
  /** ...and max load > balanceRelThreshold * min load. */
  readonly balanceRelThreshold: number;
  /** Upper bound of characters kept in the tree over all workers; LRU eviction above it. */
  readonly maxTreeChars: number;
}

export interface ConsistentHashOptions {
  /** Virtual nodes per worker on the ring. */
  readonly virtualNodes: number;
}

export const SCORER_NAMES = ['prefix', 'queue', 'kvCache', 'lora', 'inflight', 'prefill'] as const;
export type ScorerName = (typeof SCORER_NAMES)[number];
export type ScorerWeights = Readonly<Record<ScorerName, number>>;

export interface SaturationOptions {
  /** A worker whose engine has more requests waiting than this is saturated. */
  readonly maxWaiting: number;
  /** A worker whose engine's KV cache is fuller than this (0..1) is saturated. */
  readonly maxKvCacheUsage: number;
  /**
   * The batch of an engine that neither reports it nor has it configured (the worker's
   * `maxBatch`), until the scorer learns it from a reading with requests waiting: what this
   * gateway sends past its room counts as waiting there (a cold burst waits in the gateway).
   */
  readonly defaultBatch: number;
}

export interface ScorerOptions {
  readonly weights: ScorerWeights;
  readonly saturation: SaturationOptions;
  readonly heavy: HeavyTenantOptions;
}

/**
 * While one tenant is heavy (RouteContext.tenantWeight), how the scorer shares the workers'
 * prefill between its prompts and the others' (scorer.ts, "A heavy tenant").
 */
export interface HeavyTenantOptions {
  /** Whether the scorer does so at all. */
  readonly isolate: boolean;
  /** A heavy tenant's long prompts are pending prefill on at most this share of the workers at once (at least one). */
  readonly prefillShare: number;
  /** A worker with more characters pending prefill than this is prefilling a long prompt. */
  readonly longPrefillChars: number;
  /**
   * With more than 0: the workers a heavy tenant's prompts may go to are `prefillShare` of them
   * in turn, the turn moving by one worker every this many ms of the wall clock (so replicas agree
   * without telling each other), and the others' requests prefer the rest.
   */
  readonly turnMs: number;
}

export interface PolicyOptions {
  readonly random?: RandomSource;
  readonly cacheAware?: Partial<CacheAwareOptions>;
  readonly consistentHash?: Partial<ConsistentHashOptions>;
  readonly scorer?: {
    readonly weights?: Partial<ScorerWeights>;
    readonly saturation?: Partial<SaturationOptions>;
    readonly heavy?: Partial<HeavyTenantOptions>;
  };
  /** Where the scorer reads and records prefix affinity (one per gateway, shared by its models). */
  readonly affinity?: AffinityIndex;
}
