import type { Candidate, RouteContext, RoutingPolicy } from './types.js';

export class RoundRobinPolicy implements RoutingPolicy {
  readonly name = 'round_robin';
  private next = 0;

  select(candidates: readonly Candidate[], _ctx?: RouteContext): Candidate {
    return candidates[this.next++ % candidates.length]!;
  }
}
