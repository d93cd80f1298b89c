import type { Grant } from '../auth/access-control.js';
import { keyAllowsModel } from '../auth/index.js';
import { ModelNotAllowed } from '../errors/auth-errors.js';
import type { PipelineContext } from './context.js';

/**
 * The models a client named to answer when its own cannot (its body's `fallbacks`), checked as
 * its model is: each one served (else a 404 model_not_found) and allowed to the caller's key
 * (else a 403 model_not_allowed). Undefined when the client named none: the model's configured
 * fallbacks apply then.
 */
export function checkedFallbacks(
  ctx: PipelineContext,
  grant: Grant | undefined,
  fallbacks: readonly string[] | null | undefined,
): readonly string[] | undefined {
  if (fallbacks === undefined || fallbacks === null) return undefined;
  for (const model of fallbacks) {
    ctx.dispatcher.assertModel(model);
    if (grant && !keyAllowsModel(grant.key, model)) throw new ModelNotAllowed(model);
  }
  return fallbacks;
}
