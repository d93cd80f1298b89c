import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { GatewayShuttingDown } from '../errors/http-errors.js';
import { anthropicErrorBody } from '../messages/errors.js';
import type { GatewayContext } from './context.js';
import { installErrorHandlers } from './error-handler.js';
import { adminKeyRoutes } from './routes/admin-keys.js';
import { adminModelRoutes } from './routes/admin-models.js';
import { adminWorkerRoutes } from './routes/admin-workers.js';
import { conversationRoutes } from './routes/conversations.js';
import { dashboardRoutes } from './routes/dashboard.js';
import { generationRoutes } from './routes/generation.js';
import { healthRoutes } from './routes/health.js';
import { messagesRoutes } from './routes/messages.js';
import { metricsRoutes } from './routes/metrics.js';
import { modelRoutes } from './routes/models.js';
import { responseRoutes } from './routes/responses.js';

const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** A client's X-Request-Id is kept when it is a sane token; otherwise the gateway makes one. */
function requestId(header: string | string[] | undefined): string {
  if (typeof header === 'string' && CLIENT_REQUEST_ID.test(header)) return header;
  return `req_${randomUUID().replaceAll('-', '')}`;
}

export function buildServer(ctx: GatewayContext): FastifyInstance {
  const app = Fastify({
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
  });
  // Plain JSON.parse: the body is only read and forwarded, never merged into other objects, so
  // the prototype-poisoning scan of fastify's default parser buys nothing on this hot path.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    try {
      // A DELETE or GET sent with a JSON content type and nothing in it has no body, not a bad one.
      const empty =
        (body as string).length === 0 && (request.method === 'DELETE' || request.method === 'GET');
      done(null, empty ? undefined : JSON.parse(body as string));
    } catch (err) {
      (err as { statusCode?: number }).statusCode = 400;
      done(err as Error, undefined);
    }
  });
  installErrorHandlers(app, ctx.log, ctx.config.server.bodyLimitBytes);
  // One callback-style hook (no promise per request): while draining, a request on a kept-alive
  // connection gets a 503 and the connection closes; the admin API and the dashboard need the
  // admin key when one is configured.
  app.addHook('onRequest', (request, reply, done) => {
    const url = request.url;
    if (ctx.lifecycle.draining && !url.startsWith('/health') && url !== '/metrics') {
      const error = new GatewayShuttingDown();
      const body = url.startsWith('/v1/messages') ? anthropicErrorBody(error, request.id) : error.toBody();
      reply.code(error.status).headers(error.headers()).send(body);
      return;
    }
    if (url.startsWith('/admin') || url.startsWith('/dashboard')) {
      try {
        ctx.access.requireAdmin(request);
      } catch (err) {
        done(err as Error);
        return;
      }
    }
    done();
  });
  app.register(generationRoutes(ctx));
  app.register(responseRoutes(ctx));
  app.register(messagesRoutes(ctx));
  app.register(conversationRoutes(ctx));
  app.register(modelRoutes(ctx));
  app.register(healthRoutes(ctx));
  app.register(metricsRoutes(ctx));
  app.register(adminWorkerRoutes(ctx));
  app.register(adminModelRoutes(ctx));
  app.register(adminKeyRoutes(ctx));
  app.register(dashboardRoutes(ctx));
  return app;
}
