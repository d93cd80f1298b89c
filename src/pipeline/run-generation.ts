import type { Grant } from '../auth/access-control.js';
import { Cancellation } from '../dispatch/cancellation.js';
import type { DispatchRequest } from '../dispatch/dispatcher.js';
import type { ResumableStream, ResumePlan } from '../dispatch/resumable-stream.js';
import { admitRequest, checkedFallbacks, flowTicket, modelRule } from './admit.js';
import { abortWhenClientLeaves } from './client-watch.js';
import type { PipelineContext } from './context.js';
import type { ApiHandler, ApiReply, ApiRequest } from './exchange.js';
import type { GenerationFront, Translation } from './front.js';
import { relayStream, type StreamEncoder } from './relay.js';
import { headerForwarder, headerValue, parseRank, parseResumeHeader } from './request-headers.js';
import {
  endFailedRequest,
  endRelayedStream,
  observeRequest,
  type RequestObserver,
} from './request-observer.js';
import { headerText } from './response-head.js';

/** A request checked, admitted and translated: what the phases after it need. */
interface Call {
  front: GenerationFront;
  dispatch: DispatchRequest;
  grant: Grant | undefined;
  translation: Translation;
  /** How a stream may be resumed (streams only; undefined: not resumable). */
  plan: ResumePlan | undefined;
}

/**
 * The handler of a generation front: every request of chat completions, completions and
 * Anthropic Messages runs these phases, whichever way it came in (the framework-free route or
 * fastify). Observe and trace, refuse while draining, admit (key, model, limits, budget),
 * translate, dispatch (retrying before the first byte), relay (backpressure, the client leaving,
 * the clocks, resume) or answer whole, then count how it ended.
 *
 * In phases, so that what an open stream keeps alive is only what its relay needs: V8 keeps every
 * local and argument of a suspended async function until it returns, so a stream relayed inside
 * the function that parsed its request would hold the request's parsed body (and its validated
 * copy) for the stream's whole life, and every garbage collection during it would copy them.
 */
export function generationHandler(ctx: PipelineContext, front: GenerationFront): ApiHandler {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  return (request, reply) => serve(ctx, forward, front, request, reply);
}

async function serve(
  ctx: PipelineContext,
  forward: ReturnType<typeof headerForwarder>,
  front: GenerationFront,
  request: ApiRequest,
  reply: ApiReply,
): Promise<void> {
  const observer = observeRequest(ctx, front.api, front.path, request, reply.elapsedTime);
  let call: Call;
  try {
    observer.model = (request.body as Record<string, unknown> | undefined)?.model;
    const admitting = admitRequest(ctx, request, reply, front.credential?.(request.headers));
    const grant = admitting === undefined ? undefined : await admitting;
    call = prepare(ctx, forward, front, request, reply, observer, grant);
  } catch (err) {
    endFailedRequest(ctx, front.api, observer, reply, err, front.statusOf);
    return;
  }
  // Returned, not awaited: this function's frame (and the request in it) ends here.
  return call.dispatch.stream
    ? openAndRelay(ctx, call, reply, observer)
    : answerWhole(ctx, call, reply, observer);
}

/** Translates the request and builds the upstream request (no turn of the event loop). */
function prepare(
  ctx: PipelineContext,
  forward: ReturnType<typeof headerForwarder>,
  front: GenerationFront,
  request: ApiRequest,
  reply: ApiReply,
  observer: RequestObserver,
  grant: Grant | undefined,
): Call {
  const { dispatcher, router } = ctx;
  const translation = front.translate(request, grant !== undefined);
  const model = translation.model;
  dispatcher.assertModel(model);
  for (const [param, value] of translation.outputTokens) dispatcher.assertOutputTokens(model, param, value);
  observer.model = model;
  observer.trace?.request(model, translation.traced);
  const mayUse = modelRule(grant);
  const dispatch: DispatchRequest = {
    api: front.api,
    path: translation.path,
    model,
    payload: translation.payload,
    stream: translation.stream,
    requestId: request.id,
    route: {
      model,
      text: router.wantsText(model) ? translation.promptText() : undefined,
      hashKey: headerValue(request.headers, ctx.config.routing.hashHeader),
    },
    rank: parseRank(request.headers['x-data-parallel-rank']),
    headers: forward(request.headers),
    signal: abortWhenClientLeaves(reply, new Cancellation()).signal,
    receivedAt: performance.now(),
    trace: observer.trace,
    fallbacks: checkedFallbacks(ctx, mayUse, translation.fallbacks),
    mayUse,
    flow: flowTicket(ctx.config, grant, request.headers),
  };
  // A resumable stream keeps its body (a continuation is built from it); others keep none.
  const plan = dispatch.stream
    ? dispatcher.resumePlan(dispatch, translation.body, parseResumeHeader(request.headers['x-sluice-resume']))
    : undefined;
  return { front, dispatch, grant, translation, plan };
}

/** Opens the stream (retrying before the first byte), then hands it to the relay. */
async function openAndRelay(
  ctx: PipelineContext,
  call: Call,
  reply: ApiReply,
  observer: RequestObserver,
): Promise<void> {
  let stream: ResumableStream;
  try {
    stream = await ctx.dispatcher.openResumable(call.dispatch, call.plan, {
      dropUsage: call.translation.hiddenUsage,
    });
  } catch (err) {
    endFailedRequest(ctx, call.front.api, observer, reply, err, call.front.statusOf);
    return;
  }
  // Returned, not awaited: the upstream request's text and routing context are not needed any more.
  const { requestId, signal } = call.dispatch;
  const relay: RelayCall = {
    front: call.front,
    requestId,
    clientGone: signal,
    grant: call.grant,
    encoder: call.translation.encoder(requestId, stream.attemptModel),
  };
  return relayOpened(ctx, relay, stream, reply, observer);
}

/** What relaying an opened stream needs of its request. */
interface RelayCall {
  front: GenerationFront;
  requestId: string;
  clientGone: AbortSignal;
  grant: Grant | undefined;
  encoder: StreamEncoder;
}

/** Relays an opened stream to its client, and records how it ended. */
async function relayOpened(
  ctx: PipelineContext,
  call: RelayCall,
  stream: ResumableStream,
  reply: ApiReply,
  observer: RequestObserver,
): Promise<void> {
  try {
    observer.worker = stream.worker;
    observer.upstreamRequestId = stream.upstreamRequestId;
    const outcome = await relayStream(reply.raw, stream, call.encoder, {
      requestId: call.requestId,
      clientGone: call.clientGone,
      onFirstWrite: () => observer.firstByte(),
      takeOver: () => reply.hijack(),
    });
    observer.trace?.response(stream.response);
    await endRelayedStream(
      ctx,
      call.front.api,
      observer,
      outcome,
      { resumes: stream.resumes, workers: stream.workers },
      (usage) => ctx.access.recordUsage(call.grant, usage),
    );
  } catch (err) {
    endFailedRequest(ctx, call.front.api, observer, reply, err, call.front.statusOf);
  }
}

/** Sends a non-streaming request and answers with the front's shape of the engine's whole answer. */
async function answerWhole(
  ctx: PipelineContext,
  { front, dispatch, grant, translation }: Call,
  reply: ApiReply,
  observer: RequestObserver,
): Promise<void> {
  try {
    const done = await ctx.dispatcher.complete(dispatch);
    observer.worker = done.attempt.worker.id;
    observer.upstreamRequestId = done.attempt.requestId;
    const answer = translation.answer(done);
    reply.code(200).header('x-request-id', dispatch.requestId);
    if (answer.contentType !== undefined) reply.header('content-type', answer.contentType);
    if (answer.headers) for (const [name, value] of Object.entries(answer.headers)) reply.header(name, value);
    const shown = done.attempt.worker.clientName;
    if (shown !== undefined) reply.header('x-sluice-worker', headerText(shown));
    // The model that answered: another than the one asked for when it fell back.
    reply.header('x-sluice-model', headerText(done.attempt.model));
    reply.send(answer.payload);
    observer.trace?.response(done.json);
    observer.finish(200, 'completed', { usage: done.json.usage });
    if (grant)
      await ctx.access.recordUsage(grant, done.json.usage as { prompt_tokens?: unknown } | undefined);
  } catch (err) {
    endFailedRequest(ctx, front.api, observer, reply, err, front.statusOf);
  }
}
