import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { admitCaller } from '../caller.js';
import type { GatewayContext } from '../context.js';
import { headerForwarder } from '../forwarded-headers.js';
import { ResponsesSocket } from '../responses-socket.js';

/** How often open connections look whether the gateway has started to shut down. */
const DRAIN_CHECK_MS = 100;

/**
 * WebSocket mode of `/v1/responses`: `GET /v1/responses` with an upgrade. The upgrade request is
 * admitted like any client request (a missing or wrong key is a 401 answered before the
 * upgrade); each `response.create` is then admitted for its model, budget and rate limits.
 */
export function responseWebSocketRoutes(ctx: GatewayContext) {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  const replies = new WeakMap<FastifyRequest, FastifyReply>();
  const open = new Set<ResponsesSocket>();
  return async (app: FastifyInstance): Promise<void> => {
    // A graceful shutdown waits for every connection to end (upgraded sockets included): once it
    // starts, idle WebSocket connections close (1001) and busy ones close after their response.
    const watcher = setInterval(() => {
      if (!ctx.lifecycle.draining) return;
      for (const socket of open) socket.drain();
    }, DRAIN_CHECK_MS);
    watcher.unref();
    app.addHook('onClose', async () => clearInterval(watcher));
    app.addHook('preHandler', async (request, reply) => {
      await admitCaller(ctx, request, reply);
      replies.set(request, reply);
    });
    app.get('/v1/responses', { websocket: true }, (socket, request) => {
      const connection = new ResponsesSocket(
        ctx,
        socket,
        request,
        replies.get(request)!,
        forward,
        ctx.config.responses.websocket,
      );
      open.add(connection);
      connection.onClosed = () => open.delete(connection);
      connection.start();
      if (ctx.lifecycle.draining) connection.drain();
    });
  };
}
