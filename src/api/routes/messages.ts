import type { FastifyInstance } from 'fastify';
import { toSluiceError } from '../../errors/from-thrown.js';
import { InternalError } from '../../errors/http-errors.js';
import { MESSAGES_FRONT, MESSAGES_PATH } from '../../fronts/messages.js';
import { countTokensFront } from '../../fronts/messages-count-tokens.js';
import { anthropicErrorBody, anthropicStatus } from '../../messages/errors.js';
import { generationHandler } from '../../pipeline/run-generation.js';
import { utilityHandler } from '../../pipeline/run-utility.js';
import type { GatewayContext } from '../context.js';
import type { ErrorAnswer, RawRoute } from '../raw-json-route.js';

const PATH = MESSAGES_PATH;
const COUNT_PATH = '/v1/messages/count_tokens';

/** Answers an error of the Messages routes in Anthropic's shape, with its status and `request-id`. */
export function anthropicErrorAnswer(ctx: GatewayContext): ErrorAnswer {
  const bodyLimit = ctx.config.server.bodyLimitBytes;
  return (err, request, reply) => {
    const error = toSluiceError(err, bodyLimit);
    if (error instanceof InternalError) ctx.log.error({ err, requestId: request.id }, 'unexpected error');
    if (reply.sent || reply.raw.headersSent) return;
    reply.code(anthropicStatus(error));
    for (const [name, value] of Object.entries(error.responseHeaders())) reply.header(name, value);
    reply.header('request-id', request.id).send(anthropicErrorBody(error, request.id));
  };
}

/**
 * `POST /v1/messages` as a route of the framework-free way in (raw-json-route.ts), with its
 * errors in Anthropic's shape; messagesRoutes serves the same handler through fastify.
 */
export function messagesRawRoute(ctx: GatewayContext): RawRoute {
  return { handle: generationHandler(ctx, MESSAGES_FRONT), answerError: anthropicErrorAnswer(ctx) };
}

/**
 * Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`), translated
 * onto the chat-completions workers. Its routes live in a plugin of their own so that their
 * errors, and only theirs, are in Anthropic's shape.
 */
export function messagesRoutes(ctx: GatewayContext) {
  const create = generationHandler(ctx, MESSAGES_FRONT);
  const answer = anthropicErrorAnswer(ctx);

  return async (app: FastifyInstance): Promise<void> => {
    // This plugin's own error handler: errors of these routes only are in Anthropic's shape.
    app.setErrorHandler((err, request, reply) =>
      answer(err, { id: request.id, method: request.method, route: request.routeOptions.url ?? PATH }, reply),
    );
    app.post(PATH, (request, reply) => create(request, reply));
    app.post(COUNT_PATH, utilityHandler(ctx, countTokensFront()));
  };
}
