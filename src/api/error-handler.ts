import type { FastifyInstance } from 'fastify';
import { toSluiceError } from '../errors/from-thrown.js';
import { InternalError } from '../errors/http-errors.js';
import { UnknownUrl } from '../errors/not-found-errors.js';
import type { Logger } from '../observability/logger.js';
import type { ApiReply } from '../pipeline/exchange.js';

/** Codes of a body refused before any route saw it (so no request line logs it). */
const BODY_CODES = new Set(['invalid_json', 'payload_too_large', 'unsupported_media_type']);

/**
 * Answers a request that threw, in the OpenAI shape, unless its answer is already under way:
 * an unexpected error is logged with its stack, a refused body with its cause (no route logged it).
 */
export function answerError(
  err: unknown,
  request: { id: string; method: string; route: string | undefined },
  reply: Pick<ApiReply, 'sent' | 'raw' | 'code' | 'header' | 'send'>,
  log: Logger,
  bodyLimit: number,
): void {
  const error = toSluiceError(err, bodyLimit);
  if (error instanceof InternalError) log.error({ err, requestId: request.id }, 'unexpected error');
  else if (BODY_CODES.has(error.code)) {
    log.info(
      {
        requestId: request.id,
        method: request.method,
        route: request.route,
        status: error.status,
        code: error.code,
        cause: error.message.slice(0, 300),
      },
      'request body rejected',
    );
  }
  if (reply.sent || reply.raw.headersSent) return;
  reply.code(error.status);
  for (const [name, value] of Object.entries(error.responseHeaders())) reply.header(name, value);
  reply.send(error.toBody());
}

export function installErrorHandlers(app: FastifyInstance, log: Logger, bodyLimit: number): void {
  app.setErrorHandler((err, request, reply) =>
    answerError(
      err,
      { id: request.id, method: request.method, route: request.routeOptions.url },
      reply,
      log,
      bodyLimit,
    ),
  );
  app.setNotFoundHandler((request, reply) => {
    const error = new UnknownUrl(request.method, request.url);
    reply.code(404).send(error.toBody());
  });
}
