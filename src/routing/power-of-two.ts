import { randomIndex } from './random-index.js';
import type { Candidate, RandomSource, RouteContext, RoutingPolicy } from './types.js';

/** Two distinct random candidates, the less loaded wins: near least-loaded balance without herding. */
export class PowerOfTwoPolicy implements RoutingPolicy {
  readonly name = 'power_of_two';

  constructor(private readonly random: RandomSource = Math.random) {}

  select(candidates: readonly Candidate[], _ctx?: RouteContext): Candidate {
    const n = candidates.length;
    if (n === 1) return candidates[0]!;
    const i = randomIndex(this.random, n);
    let j = randomIndex(this.random, n - 1);
    if (j >= i) j++;
    const a = candidates[i]!;
    const b = candidates[j]!;
    return b.load < a.load ? b : a;
  }
}
