import type { ModelSettings } from '../config/model-settings.js';
import type { SluiceConfig } from '../config/schema.js';
import { createPolicy } from '../routing/index.js';
import type { Candidate, RouteContext, RoutingPolicy } from '../routing/types.js';

/** One routing policy instance per model (a cache-aware tree or hash ring belongs to one model). */
export class Router {
  private readonly policies = new Map<string, RoutingPolicy>();

  constructor(
    private readonly config: SluiceConfig,
    private readonly settings: ModelSettings,
  ) {}

  policyFor(model: string): RoutingPolicy {
    let policy = this.policies.get(model);
    if (!policy) {
      policy = createPolicy(this.settings.policy(model), {
        cacheAware: this.config.routing.cacheAware,
        consistentHash: this.config.routing.consistentHash,
      });
      this.policies.set(model, policy);
    }
    return policy;
  }

  /** Whether routing for `model` uses the prompt text (so callers only extract it when needed). */
  wantsText(model: string): boolean {
    return this.settings.policy(model) === 'cache_aware';
  }

  pick<T extends Candidate>(model: string, candidates: readonly T[], ctx: RouteContext): T {
    // A policy returns one of the objects it was given, so the narrowing is safe.
    return this.policyFor(model).select(candidates, ctx) as T;
  }

  removeWorker(workerId: string): void {
    for (const policy of this.policies.values()) policy.removeWorker?.(workerId);
  }
}
