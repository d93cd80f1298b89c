import type { FastifyInstance } from 'fastify';
import type { GatewayContext } from '../context.js';

/** `GET /v1/models`: every model with at least one healthy worker. */
export function modelRoutes(ctx: GatewayContext) {
  const firstSeen = new Map<string, number>();
  return async (app: FastifyInstance): Promise<void> => {
    app.get('/v1/models', async (request, reply) => {
      const grant = await ctx.access.admit(request, reply, undefined, false);
      const allowed = grant?.key.models ? new Set(grant.key.models) : undefined;
      const data = ctx.registry
        .models()
        .filter(
          (model) => (!allowed || allowed.has(model)) && ctx.registry.forModel(model).some((w) => w.healthy),
        )
        .sort()
        .map((id) => {
          const created = firstSeen.get(id) ?? Math.floor(Date.now() / 1000);
          firstSeen.set(id, created);
          return { id, object: 'model', created, owned_by: 'sluice' };
        });
      return { object: 'list', data };
    });
  };
}
