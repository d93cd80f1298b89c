import { leastLoaded } from './least-loaded.js';
import { RadixTree } from './radix-tree.js';
import type { CacheAwareOptions, Candidate, RouteContext, RoutingPolicy } from './types.js';

export const CACHE_AWARE_DEFAULTS: CacheAwareOptions = {
  matchThreshold: 0.5,
  balanceAbsThreshold: 32,
  balanceRelThreshold: 1.5,
  maxTreeChars: 16_000_000,
};

/**
 * Sends a prompt to the worker most likely to hold its prefix in KV cache, unless load is so uneven
 * that balancing matters more. Every routed prompt is recorded for the worker it went to.
 */
export class CacheAwarePolicy implements RoutingPolicy {
  readonly name = 'cache_aware';
  private readonly options: CacheAwareOptions;
  private readonly tree: RadixTree;
  private rotation = 0;

  constructor(options: Partial<CacheAwareOptions> = {}) {
    this.options = { ...CACHE_AWARE_DEFAULTS, ...options };
    this.tree = new RadixTree({ maxChars: this.options.maxTreeChars });
  }

  /** Characters currently kept in the prefix tree. */
  get treeChars(): number {
    return this.tree.size;
  }

  select(candidates: readonly Candidate[], ctx: RouteContext): Candidate {
    const text = ctx.text;
    const rotation = this.rotation++;
    if (!text) return leastLoaded(candidates, rotation);
    const chosen = this.isImbalanced(candidates)
      ? leastLoaded(candidates, rotation)
      : this.byPrefix(candidates, text, rotation);
    this.tree.insert(text, chosen.id);
    return chosen;
  }

  removeWorker(workerId: string): void {
    this.tree.removeTenant(workerId);
  }

  private byPrefix(candidates: readonly Candidate[], text: string, rotation: number): Candidate {
    const allowed = new Set<string>();
    for (const c of candidates) allowed.add(c.id);
    const match = this.tree.prefixMatch(text, allowed);
    if (match.matchedChars / text.length <= this.options.matchThreshold) {
      return leastLoaded(candidates, rotation);
    }
    const holders = candidates.filter((c) => match.workerIds.includes(c.id));
    return leastLoaded(holders, rotation);
  }

  private isImbalanced(candidates: readonly Candidate[]): boolean {
    let min = Number.POSITIVE_INFINITY;
    let max = Number.NEGATIVE_INFINITY;
    for (const c of candidates) {
      if (c.load < min) min = c.load;
      if (c.load > max) max = c.load;
    }
    const { balanceAbsThreshold, balanceRelThreshold } = this.options;
    return max - min > balanceAbsThreshold && max > balanceRelThreshold * min;
  }
}
