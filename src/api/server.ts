import { createServer, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import fastifyWebsocket from '@fastify/websocket';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  LogController,
} from 'fastify';
import { toSluiceError } from '../errors/from-thrown.js';
import { GatewayShuttingDown } from '../errors/http-errors.js';
import { InvalidUrl, PathParameterTooLong, UnsupportedContentEncoding } from '../errors/request-errors.js';
import type { GatewayContext } from './context.js';
import { installErrorHandlers } from './error-handler.js';
import { parseJsonBody } from './json-body.js';
import { type RawRoute, rawJsonRoute } from './raw-json-route.js';
import { requestId } from './request-id.js';
import type { RouteAccess } from './route-access.js';
import { adminRoutes } from './routes/admin.js';
import { conversationRoutes } from './routes/conversations.js';
import { generationHandlers, generationRoutes } from './routes/generation.js';
import { healthRoutes } from './routes/health.js';
import { messagesRawRoute, messagesRoutes } from './routes/messages.js';
import { metricsRoutes } from './routes/metrics.js';
import { modelRoutes } from './routes/models.js';
import { poolingHandlers, poolingRoutes } from './routes/pooling.js';
import { responseRoutes, responsesCreate } from './routes/responses.js';
import { responseCompactRoutes } from './routes/responses-compact.js';
import { responseWebSocketRoutes } from './routes/responses-websocket.js';

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The text of an `application/json` body as the client sent it (undefined for other
     * bodies): the generation routes forward it upstream as it is when they change nothing.
     */
    rawJson: string | undefined;
  }
}

/** After a client's FIN, when to probe whether it still reads (see keepHalfClosedClients). */
const HALF_CLOSE_PROBES_MS = [0, 50, 1_000];

/**
 * A client that half-closes its socket after sending its request (TCP FIN, `socket.end()`) still
 * reads the answer: a readable end is not a disconnect, only a closed socket is. A FIN looks the
 * same whether the client half-closed or closed for good, so while its answer has not started
 * the gateway probes with an interim `102 Processing` (which HTTP/1.1 clients skip): a client
 * that is gone answers with a reset, the next write fails, the socket closes, and the request is
 * aborted as for any client that went away. Once an event stream has started, the probe is an
 * SSE comment (`:`), since its engine may be silent for a long while and write nothing.
 */
function keepHalfClosedClients(server: Server): void {
  // node:http reads this field of its server when a socket ends; it is not in @types/node.
  (server as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
  server.on('connection', (socket: Socket) => {
    socket.once('end', () => {
      for (const ms of HALF_CLOSE_PROBES_MS) {
        const probe = () => {
          // The response in progress on this connection (node:http's own field).
          const res = (socket as { _httpMessage?: ServerResponse })._httpMessage;
          if (!res || res.destroyed || res.writableEnded || socket.destroyed) return;
          // An upgraded (WebSocket) connection speaks its own protocol now.
          if (res.req.headers.upgrade !== undefined) return;
          if (res.headersSent) {
            // A stream under way (perhaps with a silent engine): an SSE comment, which every
            // client skips, is the probe. Other answers under way end on their own writes.
            const head = (res as { _header?: string | null })._header;
            if (typeof head === 'string' && /content-type: text\/event-stream/i.test(head))
              res.write(':\n\n');
            return;
          }
          if (res.req.httpVersionMajor !== 1 || res.req.httpVersionMinor < 1) return;
          res.writeProcessing();
        };
        if (ms === 0) probe();
        else setTimeout(probe, ms).unref();
      }
    });
  });
}

/** `Content-Encoding: identity` (or empty): the body is as it is. */
function isIdentity(encoding: string): boolean {
  const value = encoding.trim().toLowerCase();
  return value === '' || value === 'identity';
}

export function buildServer(ctx: GatewayContext): FastifyInstance {
  const generation = generationHandlers(ctx);
  const pooling = poolingHandlers(ctx);
  // The generation and embeddings paths' usual requests skip the framework (see raw-json-route.ts).
  const rawRoutes = new Map<string, RawRoute>(
    [...generation, ...pooling].map(([path, handle]) => [path, { handle }] as [string, RawRoute]),
  );
  rawRoutes.set('/v1/messages', messagesRawRoute(ctx));
  rawRoutes.set('/v1/responses', { handle: responsesCreate(ctx) });
  const raw = rawJsonRoute({
    routes: rawRoutes,
    bodyLimit: ctx.config.server.bodyLimitBytes,
    log: ctx.log,
    draining: () => ctx.lifecycle.draining,
  });
  const app = Fastify({
    serverFactory: (handler, options) => {
      // A whole request must arrive within requestTimeoutMs (node answers 408 past it); node
      // checks its connections for it every connectionsCheckingInterval (30 s by default: a
      // stalled client would hold its connection for up to that much longer).
      const requestTimeout = ctx.config.server.requestTimeoutMs;
      const server = createServer(
        {
          requestTimeout,
          headersTimeout: Math.min(60_000, requestTimeout),
          connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.ceil(requestTimeout / 4))),
        },
        (req, res) => {
          if (!raw(req, res)) handler(req, res);
        },
      );
      // What fastify does to a server it makes itself (lib/server.js).
      const timeouts = options as { keepAliveTimeout?: number; connectionTimeout?: number };
      server.keepAliveTimeout = timeouts.keepAliveTimeout ?? 72_000;
      server.setTimeout(timeouts.connectionTimeout ?? 0);
      return server;
    },
    loggerInstance: ctx.log as FastifyBaseLogger,
    // Each request is logged once, when it ends, by the route (RequestObserver).
    logController: new LogController({ disableRequestLogging: true }),
    // No child logger per request: nothing logs through request.log (see RequestObserver).
    childLoggerFactory: (logger) => logger,
    bodyLimit: ctx.config.server.bodyLimitBytes,
    genReqId: (req) => requestId(req.headers['x-request-id']),
    requestIdHeader: false,
    return503OnClosing: true,
    // By close() every stream has been ended (shutdown drains first): whatever is left is cut.
    forceCloseConnections: true,
    // A URL the router cannot decode (bad percent-encoding, an overlong parameter) gets an
    // OpenAI-shaped error like any other.
    frameworkErrors: (error, _request, reply) => {
      const mapped =
        error.code === 'FST_ERR_BAD_URL'
          ? new InvalidUrl()
          : error.code === 'FST_ERR_MAX_PARAM_LENGTH'
            ? new PathParameterTooLong()
            : toSluiceError(error, ctx.config.server.bodyLimitBytes);
      const raw = reply as unknown as FastifyReply;
      raw.code(mapped.status).headers(mapped.responseHeaders()).send(mapped.toBody());
    },
  });
  keepHalfClosedClients(app.server);
  // Plain JSON.parse: the body is only read and forwarded, never merged into other objects, so
  // the prototype-poisoning scan of fastify's default parser buys nothing on this hot path.
  app.removeAllContentTypeParsers();
  app.decorateRequest('rawJson', undefined);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    try {
      const text = body as string;
      const parsed = parseJsonBody(text, request.method);
      request.rawJson = text;
      done(null, parsed);
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  installErrorHandlers(app, ctx.log, ctx.config.server.bodyLimitBytes);
  // One callback-style hook (no promise per request): while draining, a request on a kept-alive
  // connection gets a 503 and the connection closes, answered by its route's own error handler
  // (Anthropic's shape on /v1/messages); a body in a content coding (gzip, ...) is a 415, never
  // parsed as JSON. The routes that serve while draining say so in their config: the decision is
  // made on the route the router matched, never on the URL's spelling.
  app.addHook('onRequest', (request, _reply, done) => {
    if (ctx.lifecycle.draining && !(request.routeOptions.config as RouteAccess).servesWhileDraining) {
      done(new GatewayShuttingDown());
      return;
    }
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && !isIdentity(encoding)) {
      done(new UnsupportedContentEncoding(encoding));
      return;
    }
    done();
  });
  // WebSocket mode of /v1/responses; on close, connections end with 1001 (going away: clients reconnect).
  app.register(fastifyWebsocket, {
    options: { maxPayload: ctx.config.server.bodyLimitBytes },
    preClose(done) {
      for (const client of this.websocketServer.clients) client.close(1001, 'gateway shutting down');
      done();
    },
  });
  app.register(generationRoutes(generation));
  app.register(poolingRoutes(pooling));
  app.register(responseRoutes(ctx));
  app.register(messagesRoutes(ctx));
  app.register(responseWebSocketRoutes(ctx));
  app.register(responseCompactRoutes(ctx));
  app.register(conversationRoutes(ctx));
  app.register(modelRoutes(ctx));
  app.register(healthRoutes(ctx));
  app.register(metricsRoutes(ctx));
  app.register(adminRoutes(ctx));
  return app;
}
