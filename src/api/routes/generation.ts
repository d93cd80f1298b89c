import type { FastifyInstance } from 'fastify';
import type { z } from 'zod';
import { Cancellation } from '../../dispatch/cancellation.js';
import { ResumableStream } from '../../dispatch/resumable-stream.js';
import { GatewayShuttingDown, InvalidRequest } from '../../errors/http-errors.js';
import type { ApiName } from '../../observability/metrics.js';
import type { RouteContext } from '../../routing/types.js';
import { abortWhenClientLeaves } from '../client-watch.js';
import type { GatewayContext } from '../context.js';
import type { ApiReply, ApiRequest } from '../exchange.js';
import { headerForwarder } from '../forwarded-headers.js';
import { relayStream } from '../relay-stream.js';
import { endFailedRequest } from '../request-failure.js';
import { RequestObserver } from '../request-observer.js';
import {
  chatCompletionSchema,
  chatPromptText,
  completionPromptText,
  completionSchema,
} from '../schemas/generation.js';
import { validateBody } from '../schemas/validate.js';

interface GenerationKind<S extends z.ZodType> {
  api: ApiName;
  path: string;
  schema: S;
  promptText: (body: z.output<S>) => string;
}

const CHAT: GenerationKind<typeof chatCompletionSchema> = {
  api: 'chat_completions',
  path: '/v1/chat/completions',
  schema: chatCompletionSchema,
  promptText: chatPromptText,
};

const COMPLETIONS: GenerationKind<typeof completionSchema> = {
  api: 'completions',
  path: '/v1/completions',
  schema: completionSchema,
  promptText: completionPromptText,
};

function parseRank(header: string | string[] | undefined): number | undefined {
  if (header === undefined) return undefined;
  const raw = Array.isArray(header) ? header[0] : header;
  const rank = Number(raw);
  if (raw === undefined || raw.trim() === '' || !Number.isInteger(rank) || rank < 0) {
    throw new InvalidRequest(
      `X-Data-Parallel-Rank must be a non-negative integer, got '${raw}'.`,
      'x-data-parallel-rank',
      'invalid_data_parallel_rank',
    );
  }
  return rank;
}

/** `X-Sluice-Resume: on|off` turns mid-stream resume on or off for one request. */
export function parseResumeHeader(header: string | string[] | undefined): boolean | undefined {
  if (header === undefined) return undefined;
  const value = (Array.isArray(header) ? header[0] : header)?.trim().toLowerCase();
  if (value === 'on' || value === 'true' || value === '1') return true;
  if (value === 'off' || value === 'false' || value === '0') return false;
  throw new InvalidRequest(
    `X-Sluice-Resume must be on or off, got '${value}'.`,
    'x-sluice-resume',
    'invalid_value',
  );
}

function headerValue(request: ApiRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

async function serve<
  S extends z.ZodType<{
    model: string;
    stream?: boolean | null | undefined;
    stream_options?: { include_usage?: boolean | null | undefined } | null | undefined;
  }>,
>(
  ctx: GatewayContext,
  forward: ReturnType<typeof headerForwarder>,
  kind: GenerationKind<S>,
  request: ApiRequest,
  reply: ApiReply,
): Promise<void> {
  const { dispatcher, metrics, log, router } = ctx;
  const observer = new RequestObserver(metrics, log, kind.api, request.id);
  if (ctx.tracing) {
    observer.trace = ctx.tracing.startRequest({
      api: kind.api,
      route: kind.path,
      requestId: request.id,
      headers: request.headers,
      receivedAt: performance.now() - reply.elapsedTime,
    });
  }
  try {
    if (ctx.lifecycle.draining) throw new GatewayShuttingDown();
    const raw = request.body as Record<string, unknown> | undefined;
    observer.model = raw?.model;
    // Who is asking comes first: an unknown client learns nothing about the request's validity.
    // An open gateway admits without a turn of the event loop (the hot path of most deployments).
    const grant = ctx.access.open ? undefined : await ctx.access.admitBody(request, reply, true);
    const body = validateBody(kind.schema, request.body);
    dispatcher.assertModel(body.model);
    observer.trace?.request(body.model, raw ?? {});
    // With a key, usage is needed for its counters: asked of the engine, and not shown to a
    // client that did not ask for it.
    const forceUsage =
      grant !== undefined && body.stream === true && body.stream_options?.include_usage !== true;
    const upstreamBody = forceUsage
      ? { ...raw, stream_options: { ...(body.stream_options ?? {}), include_usage: true } }
      : (raw as Record<string, unknown>);
    const route: RouteContext = {
      text: router.wantsText(body.model) ? kind.promptText(body) : undefined,
      hashKey: headerValue(request, ctx.config.routing.hashHeader),
    };
    const dispatchRequest = {
      api: kind.api,
      path: kind.path,
      model: body.model,
      // The client's own JSON goes upstream: every engine-specific parameter passes through,
      // as the very text the client sent when the gateway adds nothing to it.
      payload: forceUsage || request.rawJson === undefined ? JSON.stringify(upstreamBody) : request.rawJson,
      stream: body.stream === true,
      requestId: request.id,
      route,
      rank: parseRank(request.headers['x-data-parallel-rank']),
      headers: forward(request.headers),
      signal: abortWhenClientLeaves(reply, new Cancellation()).signal,
      receivedAt: performance.now(),
      trace: observer.trace,
    };
    if (dispatchRequest.stream) {
      const plan = dispatcher.resumePlan(
        dispatchRequest,
        upstreamBody,
        parseResumeHeader(request.headers['x-sluice-resume']),
      );
      const opened = await dispatcher.openStream(dispatchRequest);
      observer.worker = opened.attempt.worker.id;
      observer.upstreamRequestId = opened.attempt.requestId;
      reply.hijack();
      const stream = new ResumableStream(opened, plan, { dropUsage: forceUsage });
      const outcome = await relayStream(reply.raw, stream, {
        requestId: request.id,
        clientGone: dispatchRequest.signal,
        showWorker: ctx.config.server.exposeWorker,
        onFirstWrite: () => observer.firstByte(),
      });
      await ctx.access.recordUsage(grant, outcome.usage);
      observer.trace?.response(stream.response);
      const resumed = stream.resumes > 0 ? { resumes: stream.resumes, workers: stream.workers } : {};
      if (outcome.kind === 'failed') {
        metrics.streamFailed(kind.api, body.model, outcome.error.reason);
        observer.finish(200, 'failed', {
          code: outcome.error.code,
          reason: outcome.error.reason,
          ...resumed,
        });
      } else if (outcome.kind === 'client_gone') {
        metrics.clientGone(kind.api, body.model);
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
    reply.code(200).header('content-type', done.contentType).header('x-request-id', request.id);
    const shown = done.attempt.worker.clientName;
    if (shown !== undefined) reply.header('x-sluice-worker', shown);
    reply.send(done.body);
    observer.trace?.response(done.json);
    observer.finish(200, 'completed', { usage: done.json.usage });
    if (grant)
      await ctx.access.recordUsage(grant, done.json.usage as { prompt_tokens?: unknown } | undefined);
  } catch (err) {
    endFailedRequest(ctx, kind.api, observer, reply, err);
  }
}

/** A route's handler, written against the exchange types (see exchange.ts). */
export type ApiHandler = (request: ApiRequest, reply: ApiReply) => Promise<void>;

/** The chat/completions and completions handlers, by path. */
export function generationHandlers(ctx: GatewayContext): ReadonlyMap<string, ApiHandler> {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  return new Map<string, ApiHandler>([
    [CHAT.path, (request, reply) => serve(ctx, forward, CHAT, request, reply)],
    [COMPLETIONS.path, (request, reply) => serve(ctx, forward, COMPLETIONS, request, reply)],
  ]);
}

/**
 * The same handlers as fastify routes: what the framework-free route (raw-json-route.ts) leaves
 * to fastify (an unusual body, a query string, a drain) is served by these.
 */
export function generationRoutes(handlers: ReadonlyMap<string, ApiHandler>) {
  return async (app: FastifyInstance): Promise<void> => {
    for (const [path, handler] of handlers) app.post(path, (request, reply) => handler(request, reply));
  };
}
