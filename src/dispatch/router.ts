import type { ModelSettings } from '../config/model-settings.js';
import type { SluiceConfig } from '../config/schema.js';
import { AffinityIndex, createPolicy } from '../routing/index.js';
import type { Candidate, RouteContext, RoutingExplanation, RoutingPolicy } from '../routing/types.js';

/**
 * One routing policy instance per model (a cache-aware tree or hash ring belongs to one model),
 * kept while some worker serves the model: discovered models and LoRA adapters come and go, and
 * a policy per name ever seen grew without bound (issue 49).
 */
export class Router {
  private readonly policies = new Map<string, RoutingPolicy>();
  /**
   * The scorer's prefix affinity, one for every model (block hashes are per model): learned from
   * this gateway's decisions, and from the other replicas' where they share it.
   */
  readonly affinity: AffinityIndex;

  constructor(
    private readonly config: SluiceConfig,
    private readonly settings: ModelSettings,
  ) {
    this.affinity = new AffinityIndex(config.routing.scorer.affinity);
  }

  policyFor(model: string): RoutingPolicy {
    let policy = this.policies.get(model);
    if (!policy) {
      policy = createPolicy(this.settings.policy(model), {
        cacheAware: this.config.routing.cacheAware,
        consistentHash: this.config.routing.consistentHash,
        scorer: this.settings.scorer(model),
        affinity: this.affinity,
      });
      this.policies.set(model, policy);
    }
    return policy;
  }

  /** Whether routing for `model` uses the prompt text (so callers only extract it when needed). */
  wantsText(model: string): boolean {
    const policy = this.settings.policy(model);
    return policy === 'cache_aware' || policy === 'scorer';
  }

  /** Whether `model`'s policy judges saturation (the scorer): its requests may wait in the gateway. */
  judgesSaturation(model: string): boolean {
    return this.settings.policy(model) === 'scorer';
  }

  pick<T extends Candidate>(model: string, candidates: readonly T[], ctx: RouteContext): T {
    // A policy returns one of the objects it was given, so the narrowing is safe.
    return this.policyFor(model).select(candidates, withModel(ctx, model)) as T;
  }

  /** Whether every one of `candidates` is saturated for `model` (false for policies that do not judge it). */
  saturated(model: string, candidates: readonly Candidate[], ctx: RouteContext): boolean {
    return this.policyFor(model).saturated?.(candidates, withModel(ctx, model)) ?? false;
  }

  /** Why the last pick for `model` went where it did, when its policy says. */
  explanation(model: string): RoutingExplanation | undefined {
    return this.policies.get(model)?.lastExplanation;
  }

  /** No worker serves `model` any more: its policy, and what it learnt, go. */
  forgetModel(model: string): void {
    this.policies.delete(model);
  }

  /** Models with a policy now (tests, and the bound above). */
  get policyCount(): number {
    return this.policies.size;
  }

  removeWorker(workerId: string): void {
    for (const policy of this.policies.values()) policy.removeWorker?.(workerId);
  }
}

function withModel(ctx: RouteContext, model: string): RouteContext {
  return ctx.model === model ? ctx : { ...ctx, model };
}
