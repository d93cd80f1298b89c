import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  ConnectionCapacityReached,
  OriginNotAllowed,
  TooManyConnections,
} from '../../errors/websocket-errors.js';
import { admitUpgrade } from '../../pipeline/admit-upgrade.js';
import { admitCaller } from '../caller.js';
import type { GatewayContext } from '../context.js';
import { ResponsesSocket } from '../responses-socket.js';

/** How often open connections look whether the gateway has started to shut down. */
const DRAIN_CHECK_MS = 100;

/**
 * WebSocket mode of `/v1/responses`: `GET /v1/responses` with an upgrade. Before the upgrade
 * (answered over HTTP, no 101): a request from a web page whose origin is not allowed is a 403;
 * one past the connection caps, in all or from its client address, a 503 or 429; then it is
 * admitted like any client request (a missing or wrong key is a 401). Each `response.create` is
 * then admitted for its model, budget and rate limits.
 */
export function responseWebSocketRoutes(ctx: GatewayContext) {
  const settings = ctx.config.responses.websocket;
  const allowedOrigins = new Set(settings.allowedOrigins);
  const open = new Set<ResponsesSocket>();
  /** Connections held (from the upgrade's admission to the socket's close), in all and by client address. */
  let held = 0;
  const heldBy = new Map<string, number>();

  /** Holds a connection slot for `request` until its socket closes; throws past a cap. */
  const hold = (request: FastifyRequest): void => {
    const socket = request.raw.socket;
    const client = request.ip;
    const mine = heldBy.get(client) ?? 0;
    if (mine >= settings.maxConnectionsPerClient)
      throw new TooManyConnections(settings.maxConnectionsPerClient);
    if (held >= settings.maxConnections) throw new ConnectionCapacityReached(settings.maxConnections);
    if (socket.destroyed) return;
    held++;
    heldBy.set(client, mine + 1);
    socket.once('close', () => {
      held--;
      const left = (heldBy.get(client) ?? 1) - 1;
      if (left > 0) heldBy.set(client, left);
      else heldBy.delete(client);
    });
  };

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
      if (!request.ws) return admitCaller(ctx, request, reply);
      await admitUpgrade(ctx, [
        () => {
          // A browser names the page's origin; other clients send none.
          const origin = request.headers.origin;
          if (origin !== undefined && !allowedOrigins.has(originOf(origin)))
            throw new OriginNotAllowed(origin);
        },
        () => admitCaller(ctx, request, reply),
        () => hold(request),
      ]);
    });
    app.get('/v1/responses', { websocket: true }, (socket, request) => {
      const connection = new ResponsesSocket(ctx, socket, request, settings);
      open.add(connection);
      connection.onClosed = () => open.delete(connection);
      connection.start();
      if (ctx.lifecycle.draining) connection.drain();
    });
  };
}

/** An `Origin` header as the URL standard serialises it (`null`, or what does not parse, as sent). */
function originOf(header: string): string {
  return URL.canParse(header) ? new URL(header).origin : header;
}
