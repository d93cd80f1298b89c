import type { FastifyInstance } from 'fastify';
import type { GatewayContext } from '../context.js';
import { SERVES_WHILE_DRAINING } from '../route-access.js';

/**
 * `GET /health`: the process is alive. `GET /health/ready`: it can serve: not shutting down,
 * and every model (configured under `models:` or served by a registered worker) has a healthy worker.
 */
export function healthRoutes(ctx: GatewayContext) {
  return async (app: FastifyInstance): Promise<void> => {
    app.get('/health', SERVES_WHILE_DRAINING, async () => ({ status: 'ok' }));
    app.get('/health/ready', SERVES_WHILE_DRAINING, async (_request, reply) => {
      const names = new Set([...Object.keys(ctx.config.models), ...ctx.registry.models()]);
      const models = [...names].sort().map((model) => {
        const workers = ctx.registry.forModel(model);
        return { model, workers: workers.length, healthy: workers.filter((w) => w.healthy).length };
      });
      const ready = !ctx.lifecycle.draining && models.length > 0 && models.every((m) => m.healthy > 0);
      reply.code(ready ? 200 : 503);
      return { status: ready ? 'ready' : 'not_ready', draining: ctx.lifecycle.draining, models };
    });
  };
}
