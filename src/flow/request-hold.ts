import type { RouteContext } from '../routing/types.js';
import type { WorkerRegistry } from '../workers/registry.js';
import type { Worker } from '../workers/worker.js';
import type { FlowHold } from './model-queue.js';
import type { TenantWeight } from './tenant-weight.js';

/** What of a request decides whether it must wait: its model, what narrows its workers, its routing context. */
export interface HeldRequest {
  readonly model: string;
  /** A data-parallel rank it asks for. */
  readonly rank?: number | undefined;
  /** Workers it may not go to (a retry's, a resume's). */
  readonly exclude?: ReadonlySet<string> | undefined;
  readonly route: RouteContext;
}

/**
 * When a request must wait in the gateway, judged for that request each time (FlowHold): every
 * worker that could take it now (healthy, circuit admitting, queue not full, not excluded, with
 * its rank) is saturated by its model's policy's judgement (`saturated`: the scorer's), told the
 * tenant's weight of that moment. False when none could take it: the pick then says why. The one
 * rule of when to wait; which workers fit is the policy's.
 */
export interface RequestHold extends FlowHold {
  /**
   * The tenant's weight of the last judgement: a request let through at once was judged a moment
   * ago, and its pick takes that weight rather than weighing the tenants again.
   */
  readonly judgedWith: TenantWeight;
}

export function requestHold(
  req: HeldRequest,
  registry: WorkerRegistry,
  saturated: (able: readonly Worker[], route: RouteContext) => boolean,
): RequestHold {
  const hold = {
    key: holdKey(req),
    judgedWith: undefined as TenantWeight,
    saturated: (weight: TenantWeight) => {
      hold.judgedWith = weight;
      const exclude = req.exclude;
      const able = registry
        .forModel(req.model)
        .filter(
          (w) =>
            w.healthy &&
            w.admits(req.model) &&
            w.limiter.canQueue &&
            (exclude === undefined || !exclude.has(w.id)) &&
            (req.rank === undefined || w.dpSize > req.rank),
        );
      return able.length > 0 && saturated(able, weighedRoute(req, weight, registry));
    },
  };
  return hold;
}

/**
 * The request's routing context as its policy is to see it: while one tenant is heavy, with its
 * tenant's weight and the model's whole worker list (the heavy tenant's turn is taken from it).
 */
export function weighedRoute(req: HeldRequest, weight: TenantWeight, registry: WorkerRegistry): RouteContext {
  if (weight === undefined && req.route.tenantWeight === undefined) return req.route;
  const fleet = weight === undefined ? undefined : registry.idsForModel(req.model);
  return { ...req.route, tenantWeight: weight, fleet };
}

/** What narrows the workers a request may go to (FlowHold.key): '' when nothing does. */
function holdKey(req: HeldRequest): string {
  const rank = req.rank === undefined ? '' : String(req.rank);
  const exclude =
    req.exclude === undefined || req.exclude.size === 0 ? '' : [...req.exclude].sort().join('\n');
  return rank === '' && exclude === '' ? '' : `${rank}\n${exclude}`;
}
