import type { FastifyInstance } from 'fastify';
import { compactHandler } from '../../pipeline/run-compact.js';
import type { GatewayContext } from '../context.js';

/** `POST /v1/responses/compact` (Open Responses): see pipeline/run-compact.ts. */
export function responseCompactRoutes(ctx: GatewayContext) {
  const handler = compactHandler(ctx);
  return async (app: FastifyInstance): Promise<void> => {
    app.post('/v1/responses/compact', (request, reply) => handler(request, reply));
  };
}
