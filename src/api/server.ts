import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import type { GatewayContext } from './context.js';
import { installErrorHandlers } from './error-handler.js';
import { adminModelRoutes } from './routes/admin-models.js';
import { adminWorkerRoutes } from './routes/admin-workers.js';
import { generationRoutes } from './routes/generation.js';
import { healthRoutes } from './routes/health.js';
import { metricsRoutes } from './routes/metrics.js';
import { modelRoutes } from './routes/models.js';

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
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    try {
      done(null, JSON.parse(body as string));
    } catch (err) {
      (err as { statusCode?: number }).statusCode = 400;
      done(err as Error, undefined);
    }
  });
  installErrorHandlers(app, ctx.log, ctx.config.server.bodyLimitBytes);
  app.register(generationRoutes(ctx));
  app.register(modelRoutes(ctx));
  app.register(healthRoutes(ctx));
  app.register(metricsRoutes(ctx));
  app.register(adminWorkerRoutes(ctx));
  app.register(adminModelRoutes(ctx));
  return app;
}
