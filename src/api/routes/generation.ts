import type { FastifyInstance } from 'fastify';
import type { z } from 'zod';
import { Cancellation } from '../../dispatch/cancellation.js';
import type { DispatchRequest, OpenedStream } from '../../dispatch/dispatcher.js';
import type { ResumePlan } from '../../dispatch/resumable-stream.js';
import { ResumableStream } from '../../dispatch/resumable-stream.js';
import { GatewayShuttingDown, InvalidRequest } from '../../errors/http-errors.js';
import type { ApiName } from '../../observability/metrics.js';
import type { Grant } from '../access-control.js';
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

interface GenerationKind<S extends GenerationSchema> {
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

type GenerationSchema = z.ZodType<{
  model: string;
  stream?: boolean | null | undefined;
  stream_options?: { include_usage?: boolean | null | undefined } | null | undefined;
  max_tokens?: number | null | undefined;
}>;

/** A request checked and admitted, ready to dispatch: what the phases after validation need of it. */
interface GenerationCall {
  dispatch: DispatchRequest;
  grant: Grant | undefined;
  /** Usage asked of the engine for a key's counters, not shown to a client that did not ask for it. */
  forceUsage: boolean;
  /** How a stream may be resumed (streams only; undefined: not resumable). */
  plan: ResumePlan | undefined;
}

/**
 * A generation request in three phases, so that what an open stream keeps alive is only what
 * its relay needs: V8 keeps every local and argument of a suspended async function until it
 * returns, so a stream relayed inside the function that parsed its request would hold the
 * request's parsed body (and its validated copy) for the stream's whole life, and every
 * garbage collection during it would copy them.
 */
async function serve<S extends GenerationSchema>(
  ctx: GatewayContext,
  forward: ReturnType<typeof headerForwarder>,
  kind: GenerationKind<S>,
  request: ApiRequest,
  reply: ApiReply,
): Promise<void> {
  const observer = new RequestObserver(ctx.metrics, ctx.log, kind.api, request.id);
  if (ctx.tracing) {
    observer.trace = ctx.tracing.startRequest({
      api: kind.api,
      route: kind.path,
      requestId: request.id,
      headers: request.headers,
      receivedAt: performance.now() - reply.elapsedTime,
    });
  }
  let call: GenerationCall;
  try {
    // Who is asking comes first: an unknown client learns nothing about the request's validity.
    // An open gateway admits without a turn of the event loop (the hot path of most deployments).
    if (ctx.lifecycle.draining) throw new GatewayShuttingDown();
    observer.model = (request.body as Record<string, unknown> | undefined)?.model;
    const grant = ctx.access.open ? undefined : await ctx.access.admitBody(request, reply, true);
    call = prepareCall(ctx, forward, kind, request, reply, observer, grant);
  } catch (err) {
    endFailedRequest(ctx, kind.api, observer, reply, err);
    return;
  }
  // Returned, not awaited: this function's frame (and the request in it) ends here.
  return call.dispatch.stream
    ? openAndRelay(ctx, call, reply, observer)
    : answerWhole(ctx, call, reply, observer);
}

/** Validates the body and builds the upstream request (no turn of the event loop). */
function prepareCall<S extends GenerationSchema>(
  ctx: GatewayContext,
  forward: ReturnType<typeof headerForwarder>,
  kind: GenerationKind<S>,
  request: ApiRequest,
  reply: ApiReply,
  observer: RequestObserver,
  grant: Grant | undefined,
): GenerationCall {
  const { dispatcher, router } = ctx;
  const raw = request.body as Record<string, unknown> | undefined;
  const body = validateBody(kind.schema, request.body);
  dispatcher.assertModel(body.model);
  dispatcher.assertOutputTokens(body.model, 'max_tokens', body.max_tokens);
  const completionTokens = raw?.max_completion_tokens;
  if (typeof completionTokens === 'number')
    dispatcher.assertOutputTokens(body.model, 'max_completion_tokens', completionTokens);
  observer.trace?.request(body.model, raw ?? {});
  const forceUsage =
    grant !== undefined && body.stream === true && body.stream_options?.include_usage !== true;
  const upstreamBody = forceUsage
    ? { ...raw, stream_options: { ...(body.stream_options ?? {}), include_usage: true } }
    : (raw as Record<string, unknown>);
  const dispatch: DispatchRequest = {
    api: kind.api,
    path: kind.path,
    model: body.model,
    // The client's own JSON goes upstream: every engine-specific parameter passes through,
    // as the very text the client sent when the gateway adds nothing to it.
    payload: forceUsage || request.rawJson === undefined ? JSON.stringify(upstreamBody) : request.rawJson,
    stream: body.stream === true,
    requestId: request.id,
    route: {
      text: router.wantsText(body.model) ? kind.promptText(body) : undefined,
      hashKey: headerValue(request, ctx.config.routing.hashHeader),
    },
    rank: parseRank(request.headers['x-data-parallel-rank']),
    headers: forward(request.headers),
    signal: abortWhenClientLeaves(reply, new Cancellation()).signal,
    receivedAt: performance.now(),
    trace: observer.trace,
  };
  // A resumable stream keeps its body (a continuation is built from it); others keep none.
  const plan = dispatch.stream
    ? dispatcher.resumePlan(dispatch, upstreamBody, parseResumeHeader(request.headers['x-sluice-resume']))
    : undefined;
  return { dispatch, grant, forceUsage, plan };
}

/** Opens the stream (retrying before the first byte), then hands it to the relay. */
async function openAndRelay(
  ctx: GatewayContext,
  call: GenerationCall,
  reply: ApiReply,
  observer: RequestObserver,
): Promise<void> {
  let opened: OpenedStream;
  try {
    opened = await ctx.dispatcher.openStream(call.dispatch);
  } catch (err) {
    endFailedRequest(ctx, call.dispatch.api, observer, reply, err);
    return;
  }
  // Returned, not awaited: the upstream request's text and routing context are not needed any more.
  const { api, model, requestId, signal } = call.dispatch;
  const relay: RelayCall = {
    api,
    model,
    requestId,
    clientGone: signal,
    grant: call.grant,
    forceUsage: call.forceUsage,
    plan: call.plan,
  };
  return relayOpened(ctx, relay, opened, reply, observer);
}

/** What relaying an opened stream needs of its request. */
interface RelayCall extends Pick<GenerationCall, 'grant' | 'forceUsage' | 'plan'> {
  api: ApiName;
  model: string;
  requestId: string;
  clientGone: AbortSignal;
}

/** Relays an opened stream to its client, and records how it ended. */
async function relayOpened(
  ctx: GatewayContext,
  call: RelayCall,
  opened: OpenedStream,
  reply: ApiReply,
  observer: RequestObserver,
): Promise<void> {
  const { api, model } = call;
  try {
    observer.worker = opened.attempt.worker.id;
    observer.upstreamRequestId = opened.attempt.requestId;
    reply.hijack();
    const stream = new ResumableStream(opened, call.plan, { dropUsage: call.forceUsage });
    const outcome = await relayStream(reply.raw, stream, {
      requestId: call.requestId,
      clientGone: call.clientGone,
      showWorker: ctx.config.server.exposeWorker,
      onFirstWrite: () => observer.firstByte(),
    });
    await ctx.access.recordUsage(call.grant, outcome.usage);
    observer.trace?.response(stream.response);
    if (outcome.kind === 'client_gone') {
      ctx.metrics.clientGone(api, model);
      observer.finish(499, 'client_gone');
      return;
    }
    const fields: Record<string, unknown> =
      outcome.kind === 'failed'
        ? { code: outcome.error.code, reason: outcome.error.reason }
        : { finishReason: outcome.finishReason, usage: outcome.usage };
    if (stream.resumes > 0) {
      fields.resumes = stream.resumes;
      fields.workers = stream.workers;
    }
    if (outcome.kind === 'failed') {
      ctx.metrics.streamFailed(api, model, outcome.error.reason);
      observer.finish(200, 'failed', fields);
    } else observer.finish(200, 'completed', fields);
  } catch (err) {
    endFailedRequest(ctx, api, observer, reply, err);
  }
}

/** Sends a non-streaming request and answers with the engine's whole answer. */
async function answerWhole(
  ctx: GatewayContext,
  { dispatch, grant }: GenerationCall,
  reply: ApiReply,
  observer: RequestObserver,
): Promise<void> {
  try {
    const done = await ctx.dispatcher.complete(dispatch);
    observer.worker = done.attempt.worker.id;
    observer.upstreamRequestId = done.attempt.requestId;
    reply.code(200).header('content-type', done.contentType).header('x-request-id', dispatch.requestId);
    const shown = done.attempt.worker.clientName;
    if (shown !== undefined) reply.header('x-sluice-worker', shown);
    reply.send(done.body);
    observer.trace?.response(done.json);
    observer.finish(200, 'completed', { usage: done.json.usage });
    if (grant)
      await ctx.access.recordUsage(grant, done.json.usage as { prompt_tokens?: unknown } | undefined);
  } catch (err) {
    endFailedRequest(ctx, dispatch.api, observer, reply, err);
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
