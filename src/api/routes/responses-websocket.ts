import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { admitCaller } from '../caller.js';
import type { GatewayContext } from '../context.js';
import { headerForwarder } from '../forwarded-headers.js';
import { ResponsesSocket } from '../responses-socket.js';

/**
 * WebSocket mode of `/v1/responses`: `GET /v1/responses` with an upgrade. The upgrade request is
 * admitted like any client request (a missing or wrong key is a 401 answered before the
 * upgrade); each `response.create` is then admitted for its model, budget and rate limits.
 */
export function responseWebSocketRoutes(ctx: GatewayContext) {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  const replies = new WeakMap<FastifyRequest, FastifyReply>();
  return async (app: FastifyInstance): Promise<void> => {
    app.addHook('preHandler', async (request, reply) => {
      await admitCaller(ctx, request, reply);
      replies.set(request, reply);
    });
    app.get('/v1/responses', { websocket: true }, (socket, request) => {
      new ResponsesSocket(
        ctx,
        socket,
        request,
        replies.get(request)!,
        forward,
        ctx.config.responses.websocket,
      ).start();
    });
  };
}
