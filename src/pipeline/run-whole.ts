import type { KindNeeded } from '../config/model-kind.js';
import { Cancellation } from '../dispatch/cancellation.js';
import type { CompletedResponse, DispatchRequest } from '../dispatch/dispatcher.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { ApiName } from '../observability/metrics.js';
import { admitRequest, flowTicket, modelRule } from './admit.js';
import { abortWhenClientLeaves } from './client-watch.js';
import type { PipelineContext } from './context.js';
import type { ApiHandler, ApiReply, ApiRequest } from './exchange.js';
import type { WholeAnswer } from './front.js';
import { headerForwarder, headerValue, parseRank } from './request-headers.js';
import { endFailedRequest, observeRequest } from './request-observer.js';
import { headerText } from './response-head.js';

/** What a whole-answer front may need to know of the gateway's bounds to translate a request. */
export interface BatchBounds {
  /** The most inputs one batch may carry (`limits.maxBatchInputs`). */
  readonly maxInputs: number;
  /** Parts of this many inputs a larger batch is split into (`routing.batchSplitSize`; 0: never). */
  readonly splitSize: number;
  /** The longest input the model takes, in tokens, when its workers report it. */
  contextLength(model: string): number | undefined;
}

/** A front's answer, and what the request is charged. */
export interface WholeResult extends WholeAnswer {
  /** The input tokens the engines counted (charged to the caller's key); undefined: none. */
  readonly usage: { readonly prompt_tokens: number } | undefined;
}

/** What a whole-answer front turns a client's request into. */
export interface WholeTranslation {
  /** The model the client named. */
  readonly model: string;
  /** What the model must serve (`any`: every model, a tokenizer). */
  readonly kind: KindNeeded;
  /** The engine endpoint. */
  readonly path: string;
  /** The engine request's JSON text (the client's own when the front changed nothing). */
  readonly payload: string;
  /**
   * A batch split across the model's workers: each part's JSON text, in order (undefined: the
   * request is sent whole). Each part is dispatched on its own, the answers given to `answer`
   * in the same order.
   */
  readonly parts?: readonly string[] | undefined;
  /** The answer in the front's shape, from the engine's (one answer, or each part's in order). */
  answer(done: readonly CompletedResponse[]): WholeResult;
  /** What the request's span records of it. */
  readonly traced: Record<string, unknown>;
}

/**
 * A front whose requests are answered whole and generate nothing (embeddings, rerank, score, a
 * tokenizer): its translation of one request onto an engine request, and of the engine's answer.
 */
export interface WholeFront {
  /** The metric and log label of its requests. */
  readonly api: ApiName;
  /** Its path, as its spans name the route. */
  readonly path: string;
  /** Validates the request and translates it (no turn of the event loop): throws typed errors. */
  translate(request: ApiRequest, bounds: BatchBounds): WholeTranslation;
}

/**
 * The handler of a whole-answer front, the same phases as a generation's answered whole: observe
 * and trace, refuse while draining, admit (key, its model list, limits, budget), translate and
 * check the model's kind, dispatch (retried and failed over before the answer: these requests are
 * idempotent), answer, then count how it ended and charge the input tokens once. A batch the
 * front split is dispatched as parts at once, each on its own worker, and answered when all are.
 */
export function wholeAnswerHandler(ctx: PipelineContext, front: WholeFront): ApiHandler {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  const bounds: BatchBounds = {
    maxInputs: ctx.config.limits.maxBatchInputs,
    splitSize: ctx.config.routing.batchSplitSize,
    contextLength: (model) => ctx.dispatcher.contextLength(model),
  };
  return async (request, reply) => {
    const observer = observeRequest(ctx, front.api, front.path, request, reply.elapsedTime);
    try {
      observer.model = (request.body as Record<string, unknown> | undefined)?.model;
      const admitting = admitRequest(ctx, request, reply);
      const grant = admitting === undefined ? undefined : await admitting;
      const translation = front.translate(request, bounds);
      const model = translation.model;
      ctx.dispatcher.assertModel(model, translation.kind);
      observer.model = model;
      observer.trace?.request(model, translation.traced);
      const cancel = abortWhenClientLeaves(reply, new Cancellation());
      const dispatch: DispatchRequest = {
        api: front.api,
        path: translation.path,
        model,
        payload: translation.payload,
        stream: false,
        requestId: request.id,
        // Nothing of these requests stays in an engine's cache for the next: no prompt text to route by.
        route: {
          model,
          text: undefined,
          hashKey: headerValue(request.headers, ctx.config.routing.hashHeader),
        },
        rank: parseRank(request.headers['x-data-parallel-rank']),
        headers: forward(request.headers),
        signal: cancel.signal,
        receivedAt: performance.now(),
        trace: observer.trace,
        flow: flowTicket(ctx.config, grant, request.headers),
        mayUse: modelRule(grant),
      };
      const done = translation.parts
        ? await dispatchParts(ctx, dispatch, translation.parts, cancel)
        : [await ctx.dispatcher.complete(dispatch)];
      const first = done[0]!;
      observer.worker = first.attempt.worker.id;
      observer.upstreamRequestId = first.attempt.requestId;
      const result = translation.answer(done);
      send(reply, request.id, result, done);
      if (done.length === 1) observer.trace?.response(first.json);
      else observer.trace?.usage(result.usage);
      observer.finish(
        200,
        'completed',
        done.length === 1
          ? { usage: result.usage }
          : { usage: result.usage, parts: done.length, workers: done.map((d) => d.attempt.worker.id) },
      );
      if (grant) await ctx.access.recordUsage(grant, result.usage);
    } catch (err) {
      endFailedRequest(ctx, front.api, observer, reply, err);
    }
  };
}

function send(
  reply: ApiReply,
  requestId: string,
  result: WholeResult,
  done: readonly CompletedResponse[],
): void {
  reply.code(200).header('x-request-id', requestId);
  if (result.contentType !== undefined) reply.header('content-type', result.contentType);
  if (result.headers) for (const [name, value] of Object.entries(result.headers)) reply.header(name, value);
  const shown = [...new Set(done.map((d) => d.attempt.worker.clientName))];
  const names = shown.flatMap((name) => (name === undefined ? [] : [headerText(name)]));
  if (names.length === shown.length) reply.header('x-sluice-worker', names.join(', '));
  reply.send(result.payload);
}

/**
 * Sends the parts of a split batch at once, each dispatched (routed, retried, failed over) on its
 * own under the request's id and its part's number, and resolves with their answers in order. A
 * part that fails for good fails the request: the other parts are abandoned (as a client that
 * left abandons them: no worker is blamed for it) and its error is the request's.
 */
async function dispatchParts(
  ctx: PipelineContext,
  base: DispatchRequest,
  parts: readonly string[],
  cancel: Cancellation,
): Promise<CompletedResponse[]> {
  let failure: unknown;
  const settled = await Promise.allSettled(
    parts.map((payload, i) =>
      ctx.dispatcher
        .complete({ ...base, payload, requestId: `${base.requestId}-part${i + 1}` })
        .catch((err: unknown) => {
          if (!cancel.aborted) {
            failure = err;
            cancel.abort(new ClientDisconnected());
          }
          throw err;
        }),
    ),
  );
  if (failure !== undefined) throw failure;
  if (cancel.aborted) throw new ClientDisconnected();
  return settled.map((s) => (s as PromiseFulfilledResult<CompletedResponse>).value);
}
