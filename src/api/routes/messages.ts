import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { bearerToken } from '../../auth/index.js';
import { ResumableStream } from '../../dispatch/resumable-stream.js';
import { GatewayShuttingDown, InternalError } from '../../errors/http-errors.js';
import { estimateTokens, TokenizerClient } from '../../messages/count-tokens.js';
import { anthropicErrorBody, anthropicStatus } from '../../messages/errors.js';
import { toMessage } from '../../messages/from-chat.js';
import { countTokensRequestSchema, messagesRequestSchema } from '../../messages/request-schema.js';
import { toChatRequest } from '../../messages/to-chat.js';
import { abortWhenClientLeaves } from '../client-watch.js';
import type { GatewayContext } from '../context.js';
import { toSluiceError } from '../error-handler.js';
import type { ApiReply, ApiRequest } from '../exchange.js';
import { headerForwarder } from '../forwarded-headers.js';
import { relayMessages } from '../messages-relay.js';
import type { ErrorAnswer, RawRoute } from '../raw-json-route.js';
import { endFailedRequest } from '../request-failure.js';
import { RequestObserver } from '../request-observer.js';
import { type ChatCompletionRequest, chatPromptText } from '../schemas/generation.js';
import { validateBody } from '../schemas/validate.js';
import { parseResumeHeader } from './generation.js';

const API = 'messages' as const;
const PATH = '/v1/messages';
const COUNT_PATH = '/v1/messages/count_tokens';
/** The `route` label of count_tokens requests in the request metrics and logs. */
const COUNT_ROUTE = 'messages_count_tokens';

function headerValue(request: Pick<ApiRequest, 'headers'>, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** Anthropic clients send their key as `x-api-key`; `Authorization: Bearer` works too. */
function credentialOf(request: Pick<ApiRequest, 'headers'>): string | undefined {
  return headerValue(request, 'x-api-key') ?? bearerToken(request.headers.authorization);
}

/** Answers an error of the Messages routes in Anthropic's shape, with its status and `request-id`. */
export function anthropicErrorAnswer(ctx: GatewayContext): ErrorAnswer {
  const bodyLimit = ctx.config.server.bodyLimitBytes;
  return (err, request, reply) => {
    const error = toSluiceError(err, bodyLimit);
    if (error instanceof InternalError) ctx.log.error({ err, requestId: request.id }, 'unexpected error');
    if (reply.sent || reply.raw.headersSent) return;
    reply.code(anthropicStatus(error));
    for (const [name, value] of Object.entries(error.headers())) reply.header(name, value);
    reply.header('request-id', request.id).send(anthropicErrorBody(error, request.id));
  };
}

/**
 * `POST /v1/messages` as a route of the framework-free way in (raw-json-route.ts), with its
 * errors in Anthropic's shape; messagesRoutes serves the same handler through fastify.
 */
export function messagesRawRoute(ctx: GatewayContext): RawRoute {
  return { handle: messagesCreate(ctx), answerError: anthropicErrorAnswer(ctx) };
}

/** The handler of `POST /v1/messages`, written against the exchange types (see exchange.ts). */
function messagesCreate(ctx: GatewayContext): (request: ApiRequest, reply: ApiReply) => Promise<void> {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  return async function create(request: ApiRequest, reply: ApiReply): Promise<void> {
    const { dispatcher, metrics, router } = ctx;
    const observer = new RequestObserver(metrics, ctx.log, API, request.id);
    if (ctx.tracing) {
      observer.trace = ctx.tracing.startRequest({
        api: API,
        route: PATH,
        requestId: request.id,
        headers: request.headers,
        receivedAt: performance.now() - reply.elapsedTime,
      });
    }
    try {
      if (ctx.lifecycle.draining) throw new GatewayShuttingDown();
      const raw = request.body as Record<string, unknown> | undefined;
      const grant = await ctx.access.admitBody(request, reply, true, credentialOf(request));
      const body = validateBody(messagesRequestSchema, request.body);
      dispatcher.assertModel(body.model);
      dispatcher.assertOutputTokens(body.model, 'max_tokens', body.max_tokens);
      observer.model = body.model;
      observer.trace?.request(body.model, raw ?? {});
      const chatBody = toChatRequest(body);
      const dispatchRequest = {
        api: API,
        path: '/v1/chat/completions',
        model: body.model,
        payload: JSON.stringify(chatBody),
        stream: body.stream === true,
        requestId: request.id,
        route: {
          // The same text as chat's: a conversation routes alike on either API (cache-aware routing).
          text: router.wantsText(body.model)
            ? chatPromptText(chatBody as unknown as ChatCompletionRequest)
            : undefined,
          hashKey: headerValue(request, ctx.config.routing.hashHeader),
        },
        rank: undefined,
        headers: forward(request.headers),
        signal: abortWhenClientLeaves(reply, new AbortController()).signal,
        receivedAt: performance.now(),
        trace: observer.trace,
      };
      if (dispatchRequest.stream) {
        const plan = dispatcher.resumePlan(
          dispatchRequest,
          chatBody,
          parseResumeHeader(request.headers['x-sluice-resume']),
        );
        const opened = await dispatcher.openStream(dispatchRequest);
        observer.worker = opened.attempt.worker.id;
        observer.upstreamRequestId = opened.attempt.requestId;
        reply.hijack();
        const stream = new ResumableStream(opened, plan);
        const outcome = await relayMessages(reply.raw, stream, {
          requestId: request.id,
          model: body.model,
          stopSequences: body.stop_sequences,
          clientGone: dispatchRequest.signal,
          onFirstWrite: () => observer.firstByte(),
        });
        await ctx.access.recordUsage(grant, outcome.usage);
        observer.trace?.response(stream.response);
        observer.trace?.usage(outcome.usage);
        const resumed = stream.resumes > 0 ? { resumes: stream.resumes, workers: stream.workers } : {};
        if (outcome.kind === 'failed') {
          metrics.streamFailed(API, body.model, outcome.error.reason);
          observer.trace?.failed(outcome.error.code);
          observer.finish(200, 'failed', {
            code: outcome.error.code,
            reason: outcome.error.reason,
            ...resumed,
          });
        } else if (outcome.kind === 'client_gone') {
          metrics.clientDisconnects.inc({ api: API, model: body.model });
          observer.finish(499, 'client_gone');
        } else {
          observer.finish(200, 'completed', {
            finishReason: outcome.finishReason,
            usage: outcome.usage,
            ...resumed,
          });
        }
        return;
      }
      const done = await dispatcher.complete(dispatchRequest);
      observer.worker = done.attempt.worker.id;
      observer.upstreamRequestId = done.attempt.requestId;
      const message = toMessage(done.json, body.model, body.stop_sequences);
      reply.code(200).header('x-request-id', request.id).header('request-id', request.id);
      const shown = done.attempt.worker.clientName;
      if (shown !== undefined) reply.header('x-sluice-worker', shown);
      reply.send(message);
      observer.trace?.response(done.json);
      observer.finish(200, 'completed', { usage: done.json.usage });
      await ctx.access.recordUsage(grant, done.json.usage as { prompt_tokens?: unknown } | undefined);
    } catch (err) {
      endFailedRequest(ctx, API, observer, reply, err, anthropicStatus);
    }
  };
}

/**
 * Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`), translated
 * onto the chat-completions workers. Its routes live in a plugin of their own so that their
 * errors, and only theirs, are in Anthropic's shape.
 */
export function messagesRoutes(ctx: GatewayContext) {
  const tokenizer = new TokenizerClient();
  const bodyLimit = ctx.config.server.bodyLimitBytes;
  const create = messagesCreate(ctx);
  const answer = anthropicErrorAnswer(ctx);

  async function countTokens(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const observer = new RequestObserver(ctx.metrics, ctx.log, COUNT_ROUTE, request.id);
    try {
      // Counting spends no generation, but it costs a call to the engine's tokenizer: it is
      // admitted like any request, against the key's rate limits and budget.
      await ctx.access.admitBody(request, reply, true, credentialOf(request));
      const body = validateBody(countTokensRequestSchema, request.body);
      ctx.dispatcher.assertModel(body.model);
      observer.model = body.model;
      let count: number | undefined;
      const worker = ctx.registry.forModel(body.model).find((w) => w.healthy);
      if (worker) {
        observer.worker = worker.id;
        count = await tokenizer.count(worker, body);
      }
      const source = count === undefined ? 'estimate' : 'tokenizer';
      reply
        .code(200)
        .header('x-request-id', request.id)
        .header('request-id', request.id)
        .header('x-sluice-token-count', source)
        .send({ input_tokens: count ?? estimateTokens(body) });
      observer.finish(200, 'completed', { tokenCount: source });
    } catch (err) {
      const error = toSluiceError(err, bodyLimit);
      observer.finish(anthropicStatus(error), 'error', { code: error.code });
      throw error;
    }
  }

  return async (app: FastifyInstance): Promise<void> => {
    // This plugin's own error handler: errors of these routes only are in Anthropic's shape.
    app.setErrorHandler((err, request, reply) =>
      answer(err, { id: request.id, method: request.method, route: request.routeOptions.url ?? PATH }, reply),
    );
    app.post(PATH, (request, reply) => create(request, reply));
    app.post(COUNT_PATH, countTokens);
  };
}
