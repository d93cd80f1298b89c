import { CacheAwarePolicy } from './cache-aware.js';
import { ConsistentHashPolicy } from './consistent-hash.js';
import { LeastOutstandingPolicy } from './least-outstanding.js';
import { PowerOfTwoPolicy } from './power-of-two.js';
import { RandomPolicy } from './random.js';
import { RoundRobinPolicy } from './round-robin.js';
import { ScorerPolicy } from './scorer.js';
import type { PolicyName, PolicyOptions, RoutingPolicy } from './types.js';

export {
  AFFINITY_DEFAULTS,
  AffinityIndex,
  type AffinityListener,
  type AffinityOptions,
} from './affinity-index.js';
export { CACHE_AWARE_DEFAULTS, CacheAwarePolicy } from './cache-aware.js';
export { CONSISTENT_HASH_DEFAULTS, ConsistentHashPolicy } from './consistent-hash.js';
export { hash32 } from './hash.js';
export { LeastOutstandingPolicy } from './least-outstanding.js';
export { PowerOfTwoPolicy } from './power-of-two.js';
export { blockHashes } from './prefix-blocks.js';
export { type PrefixMatch, RadixTree, type RadixTreeOptions } from './radix-tree.js';
export { RandomPolicy } from './random.js';
export { RoundRobinPolicy } from './round-robin.js';
export { SCORER_DEFAULTS, ScorerPolicy, turnClock } from './scorer.js';
export * from './types.js';

export function createPolicy(name: PolicyName, options: PolicyOptions = {}): RoutingPolicy {
  switch (name) {
    case 'round_robin':
      return new RoundRobinPolicy();
    case 'random':
      return new RandomPolicy(options.random);
    case 'least_outstanding':
      return new LeastOutstandingPolicy();
    case 'power_of_two':
      return new PowerOfTwoPolicy(options.random);
    case 'cache_aware':
      return new CacheAwarePolicy(options.cacheAware);
    case 'consistent_hash':
      return new ConsistentHashPolicy(options.consistentHash);
    case 'scorer':
      return new ScorerPolicy(options.scorer, options.affinity, options.random);
    default: {
      const unknown: never = name;
      throw new Error(`unknown routing policy: ${String(unknown)}`);
    }
  }
}
