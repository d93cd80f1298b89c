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
] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export interface Candidate {
  /** Stable worker id (the same worker keeps it across calls). */
  readonly id: string;
  /** Requests in flight plus queued on this worker right now. */
  readonly load: number;
}

export interface RouteContext {
  /** The prompt as text, for prefix matching (cache_aware). */
  readonly text?: string | undefined;
  /** A session key, for consistent_hash (from a header such as X-Session-Id). */
  readonly hashKey?: string | undefined;
}

export interface RoutingPolicy {
  readonly name: PolicyName;
  /** Picks one of `candidates` (never empty). Returns the chosen candidate. */
  select(candidates: readonly Candidate[], ctx: RouteContext): Candidate;
  /** A worker left the pool for good: forget what is kept about it. */
  removeWorker?(workerId: string): void;
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

export interface PolicyOptions {
  readonly random?: RandomSource;
  readonly cacheAware?: Partial<CacheAwareOptions>;
  readonly consistentHash?: Partial<ConsistentHashOptions>;
}
