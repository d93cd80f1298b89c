import type { FastifyInstance } from 'fastify';
import type { GatewayContext } from '../context.js';

/**
 * `GET /admin/replicas`: what this replica shares with the others through Redis (its id, the
 * others it hears from, what it sent and applied) and what failed, by channel and cause (as
 * `sluice_replica_share_failures_total`).
 */
export function adminReplicaRoutes(ctx: GatewayContext) {
  return async (app: FastifyInstance): Promise<void> => {
    app.get('/admin/replicas', async () => ctx.sharing?.snapshot() ?? { enabled: false });
  };
}
