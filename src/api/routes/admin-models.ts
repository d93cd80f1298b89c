import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { fanOut, UTILITY_METHODS, type UtilityMethod } from '../../dispatch/utility-calls.js';
import { ModelNotFound } from '../../errors/not-found-errors.js';
import type { GatewayContext } from '../context.js';

/**
 * Utility calls fanned out to every worker of a model:
 * `POST /admin/models/:model/flush_cache`, `GET /admin/models/:model/is_sleeping` (consensus),
 * `POST /admin/models/:model/sleep`, `POST /admin/models/:model/wake_up`.
 * 200 with per-worker results when every worker succeeded; otherwise the typed error's status,
 * with the same per-worker results beside it.
 */
export function adminModelRoutes(ctx: GatewayContext) {
  type ModelRequest = FastifyRequest<{ Params: { model: string } }>;
  const route = (method: UtilityMethod) => async (request: ModelRequest, reply: FastifyReply) => {
    const workers = ctx.registry.forModel(request.params.model);
    if (workers.length === 0) throw new ModelNotFound(request.params.model);
    const outcome = await fanOut(workers, method, ctx.config.health.timeoutMs * 5);
    const body = {
      object: 'utility_result',
      call_id: outcome.callId,
      method: outcome.method,
      model: request.params.model,
      results: outcome.results,
      ...(outcome.value !== undefined ? { value: outcome.value } : {}),
    };
    if (!outcome.error) return body;
    reply.code(outcome.error.status);
    return { ...outcome.error.toBody(), ...body };
  };
  return async (app: FastifyInstance): Promise<void> => {
    app.post('/admin/models/:model/flush_cache', route(UTILITY_METHODS.flush_cache));
    app.get('/admin/models/:model/is_sleeping', route(UTILITY_METHODS.is_sleeping));
    app.post('/admin/models/:model/sleep', route(UTILITY_METHODS.sleep));
    app.post('/admin/models/:model/wake_up', route(UTILITY_METHODS.wake_up));
  };
}
