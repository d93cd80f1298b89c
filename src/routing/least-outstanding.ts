import { leastLoaded } from './least-loaded.js';
import type { Candidate, RouteContext, RoutingPolicy } from './types.js';

export class LeastOutstandingPolicy implements RoutingPolicy {
  readonly name = 'least_outstanding';
  private rotation = 0;

  select(candidates: readonly Candidate[], _ctx?: RouteContext): Candidate {
    return leastLoaded(candidates, this.rotation++);
  }
}
