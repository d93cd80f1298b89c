import type { IncomingHttpHeaders } from 'node:http';
import type { SluiceError } from '../errors/base.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { ResolvedContext } from '../responses/context.js';
import type { Caller } from '../responses/ownership.js';
import { type CreateResponseRequest, createResponseSchema } from '../responses/request-schema.js';
import type { EventWriter, ResponseRun } from '../responses/response-run.js';
import type { PreparedResponse, ResponsesService, Terminal } from '../responses/service.js';
import { admitRequest, checkedFallbacks, flowTicket, modelRule } from './admit.js';
import type { PipelineContext } from './context.js';
import { headerForwarder, headerValue, parseResumeHeader } from './request-headers.js';
import {
  countRunEnd,
  endClientGone,
  endFailedRequest,
  observeRequest,
  type RequestObserver,
} from './request-observer.js';
import { validateBody } from './validate-body.js';

export interface ResponsePipelineContext extends PipelineContext {
  readonly responses: ResponsesService;
}

/**
 * How one Responses create came in and is answered: over HTTP (a route's reply: SSE events, a
 * whole JSON answer, a queued background response) or as a WebSocket `response.create` (events
 * as messages). The transport's part of a create and nothing else; the phases are the pipeline's.
 */
export interface ResponseChannel {
  readonly requestId: string;
  readonly headers: IncomingHttpHeaders;
  /** The create's body (a WebSocket create without its envelope fields). */
  readonly body: Record<string, unknown>;
  /** How long ago it arrived, in ms. */
  readonly elapsedMs: number;
  /** Aborted when the client goes away. */
  readonly signal: AbortSignal;
  /** Where admission sets the rate-limit headers. */
  readonly answering: { readonly raw: { setHeader(name: string, value: string): unknown } };
  /** Whether the events are streamed (HTTP: the request's `stream`; a WebSocket always). */
  streams(request: CreateResponseRequest): boolean;
  /** Refusals of this transport, before admission (the fields a WebSocket create may not carry). */
  refuse?(body: Record<string, unknown>): void;
  /** The key the request came with when admission names none (a WebSocket's, admitted at its upgrade). */
  readonly caller?: Caller | undefined;
  /**
   * What the create continues from when the transport knows it (a WebSocket connection's own
   * responses); undefined: the translator reads it from the store.
   */
  context?(request: CreateResponseRequest): Promise<ResolvedContext | undefined>;
  /**
   * Where a streamed response's events go, its headers naming `worker` (the public name, if
   * shown) and the `model` that answers (another than the one asked for when it fell back).
   */
  events(worker: string | undefined, model: string | undefined): EventWriter;
  /** A whole answer: the response's JSON (non-streaming HTTP; a queued background response). */
  answer(json: string, worker: string | undefined, model: string | undefined): void;
  /** Streams a background run to the client until its end; false when the client left first. */
  watch(run: ResponseRun): Promise<boolean>;
  /** The client left: closes what is left of its connection. */
  gone(): void;
  /** Answers an error in the transport's shape (HTTP: thrown for the route's error handler). */
  fail(error: SluiceError): void;
  /** Told how a foreground response ended (a WebSocket keeps completed ones for continuations). */
  ended?(prepared: PreparedResponse, terminal: Terminal): void;
}

/**
 * Every Responses create, HTTP and WebSocket alike, runs these phases: observe and trace, refuse
 * while draining, admit, validate and translate (the chain it continues, its files and MCP
 * tools), then run it (in the background, streamed, or whole) to its one durable terminal write,
 * and count how it ended.
 */
export function responseCreate(ctx: ResponsePipelineContext): (channel: ResponseChannel) => Promise<void> {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  return (channel) => create(ctx, forward, channel);
}

async function create(
  ctx: ResponsePipelineContext,
  forward: ReturnType<typeof headerForwarder>,
  channel: ResponseChannel,
): Promise<void> {
  const observer = observeRequest(
    ctx,
    'responses',
    '/v1/responses',
    { id: channel.requestId, headers: channel.headers },
    channel.elapsedMs,
  );
  try {
    observer.model = channel.body.model;
    channel.refuse?.(channel.body);
    const admitting = admitRequest(ctx, channel, channel.answering);
    const grant = admitting === undefined ? undefined : await admitting;
    const request = validateBody(createResponseSchema, channel.body);
    const trace = observer.trace;
    trace?.request(request.model, channel.body);
    // The key this request came with owns what it makes, and may only continue what it owns.
    const caller = grant?.key.id ?? channel.caller ?? null;
    const context = await channel.context?.(request);
    const mayUse = modelRule(grant);
    const prepared = await ctx.responses.prepare({
      request,
      requestId: channel.requestId,
      wantsText: ctx.router.wantsText(request.model),
      hashKey: headerValue(channel.headers, ctx.config.routing.hashHeader),
      flow: flowTicket(ctx.config, grant, channel.headers),
      resume: parseResumeHeader(channel.headers['x-sluice-resume']),
      onUsage: (usage) => {
        trace?.usage(usage);
        void ctx.access.recordUsage(grant, usage);
      },
      headers: forward(channel.headers),
      signal: channel.signal,
      receivedAt: performance.now(),
      trace,
      caller,
      context,
      fallbacks: checkedFallbacks(ctx, mayUse, request.fallbacks),
      mayUse,
    });
    trace?.response({ id: prepared.response.id, model: prepared.response.model });
    if (request.background) return await runInBackground(ctx, channel, prepared, observer, request);
    await runInForeground(ctx, channel, prepared, observer, request);
  } catch (err) {
    const error = endFailedRequest(ctx, 'responses', observer, undefined, err);
    if (error instanceof ClientDisconnected) channel.gone();
    else channel.fail(error);
  }
}

/** Stored as queued, then generated detached from the client; a streaming client watches it. */
async function runInBackground(
  ctx: ResponsePipelineContext,
  channel: ResponseChannel,
  prepared: PreparedResponse,
  observer: RequestObserver,
  request: CreateResponseRequest,
): Promise<void> {
  const { run, queuedJson } = await ctx.responses.startBackground(prepared);
  if (!channel.streams(request)) {
    channel.answer(queuedJson, undefined, undefined);
    observer.finish(200, 'queued');
    return;
  }
  observer.firstByte();
  // A client that leaves before the end is counted; the background response goes on without it.
  if (await channel.watch(run)) observer.finish(200, 'streamed');
  else endClientGone(ctx, 'responses', observer);
}

/** Opens the engine stream (retried before its first byte), runs it to its end, and answers. */
async function runInForeground(
  ctx: ResponsePipelineContext,
  channel: ResponseChannel,
  prepared: PreparedResponse,
  observer: RequestObserver,
  request: CreateResponseRequest,
): Promise<void> {
  const stream = await ctx.responses.open(prepared);
  observer.worker = stream.worker;
  observer.upstreamRequestId = stream.upstreamRequestId;
  const shown = stream.clientWorker;
  const run = ctx.responses.newRun(prepared);
  const streams = channel.streams(request);
  if (streams) {
    run.addWriter(channel.events(shown, stream.attemptModel));
    observer.firstByte();
  }
  const terminal = await ctx.responses.runForeground(prepared, run, stream, channel.signal);
  channel.ended?.(prepared, terminal);
  if (channel.signal.aborted) {
    endClientGone(ctx, 'responses', observer);
    if (!streams) channel.gone();
    return;
  }
  const error = terminal.end.error;
  if (error && !(error instanceof ClientDisconnected)) {
    countRunEnd(ctx.metrics, 'responses', prepared.response.model, error);
    observer.trace?.failed(error.code);
  } else if (terminal.status === 'failed') noteFailure(observer, terminal);
  if (!streams) channel.answer(terminal.json, shown, prepared.response.model);
  observer.finish(200, terminal.status);
}

/** A failed response's stable error code, for its span (a failure of its own, not the engine's). */
function noteFailure(observer: RequestObserver, terminal: Terminal): void {
  if (!observer.trace) return;
  try {
    const code = (JSON.parse(terminal.json) as { error?: { code?: unknown } }).error?.code;
    if (typeof code === 'string') observer.trace.failed(code);
  } catch {
    // the terminal JSON is the gateway's own; nothing to note when it has no code
  }
}
