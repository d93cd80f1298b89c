import { randomIndex } from './random-index.js';
import type { Candidate, RandomSource, RouteContext, RoutingPolicy } from './types.js';

export class RandomPolicy implements RoutingPolicy {
  readonly name = 'random';

  constructor(private readonly random: RandomSource = Math.random) {}

  select(candidates: readonly Candidate[], _ctx?: RouteContext): Candidate {
    return candidates[randomIndex(this.random, candidates.length)]!;
  }
}
