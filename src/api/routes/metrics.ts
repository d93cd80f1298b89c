import type { FastifyInstance } from 'fastify';
import type { GatewayContext } from '../context.js';
import { SERVES_WHILE_DRAINING } from '../route-access.js';

export function metricsRoutes(ctx: GatewayContext) {
  return async (app: FastifyInstance): Promise<void> => {
    app.get('/metrics', SERVES_WHILE_DRAINING, async (_request, reply) => {
      reply.header('content-type', ctx.metrics.registry.contentType);
      return ctx.metrics.scrape();
    });
  };
}
