import type { SluiceError } from '../errors/base.js';
import { toSluiceError } from '../errors/from-thrown.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { StreamError } from '../errors/stream-errors.js';
import type { Logger } from '../observability/logger.js';
import type { ApiName, GatewayMetrics } from '../observability/metrics.js';
import { requestedModel, UNKNOWN_MODEL } from '../observability/model-label.js';
import type { RequestTrace } from '../observability/tracing.js';
import type { Usage } from '../streams/chat-stream-tracker.js';
import type { PipelineContext } from './context.js';
import type { ApiReply, ApiRequest } from './exchange.js';
import type { StreamOutcome } from './relay.js';

/**
 * Records one client request: the in-flight gauge while it runs, then one log line and the
 * request counter and latency histograms when it ends. Labels stay bounded: a model nobody
 * serves is counted and logged as `unknown` (`GatewayMetrics.modelLabel`), never under the
 * client's string, which the log line keeps, cut short, as `requestedModel`. With tracing on, the
 * request's server span gets the same first byte and terminal outcome.
 */
export class RequestObserver {
  private readonly startedAt = performance.now();
  private done = false;
  private label = UNKNOWN_MODEL;
  /** The client's model string when it is not a known model (cut short), for the log line. */
  private requested: string | undefined;
  worker: string | undefined;
  upstreamRequestId: string | undefined;
  attempts = 0;
  firstByteAt: number | undefined;
  /** The request's spans (tracing on and the request sampled). */
  trace: RequestTrace | undefined;

  constructor(
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
    readonly route: ApiName | string,
    readonly requestId: string,
  ) {
    metrics.inflight.inc({ route });
  }

  /** The model's label (`unknown` unless a worker serves it). */
  get model(): string {
    return this.label;
  }

  /** Notes the model the client asked for (anything: only a known model becomes a label). */
  set model(model: unknown) {
    this.label = this.metrics.modelLabel(model);
    this.requested = this.label === model ? undefined : requestedModel(model);
  }

  firstByte(): void {
    if (this.firstByteAt !== undefined) return;
    this.firstByteAt = performance.now();
    this.trace?.firstToken(this.firstByteAt);
    this.metrics
      .folded(this.metrics.timeToFirstToken, this.route, this.model)
      .observe((this.firstByteAt - this.startedAt) / 1000);
  }

  finish(status: number, outcome: string, fields: Record<string, unknown> = {}): void {
    if (this.done) return;
    this.done = true;
    this.trace?.end(status, outcome, fields);
    const seconds = (performance.now() - this.startedAt) / 1000;
    this.metrics.inflight.dec({ route: this.route });
    this.metrics.requests.inc({ route: this.route, model: this.model, status: String(status) });
    this.metrics.folded(this.metrics.requestDuration, this.route, this.model).observe(seconds);
    const line = {
      requestId: this.requestId,
      route: this.route,
      model: this.model,
      requestedModel: this.requested,
      status,
      outcome,
      worker: this.worker,
      upstreamRequestId: this.upstreamRequestId,
      durationMs: Math.round(seconds * 1e4) / 10,
      ttftMs:
        this.firstByteAt === undefined
          ? undefined
          : Math.round((this.firstByteAt - this.startedAt) * 10) / 10,
      ...fields,
    };
    this.metrics.recent.push({
      requestId: this.requestId,
      route: this.route,
      model: this.model,
      status,
      outcome,
      code: typeof fields.code === 'string' ? fields.code : undefined,
      worker: this.worker,
      durationMs: line.durationMs,
      ttftMs: line.ttftMs,
      at: Date.now(),
    });
    if (status >= 500 || outcome === 'failed') this.log.warn(line, 'request ended');
    else this.log.info(line, 'request ended');
  }
}

/**
 * Starts observing a client request: its observer, and its span when tracing is on.
 * `elapsedMs`: how long ago the request arrived (its headers were read).
 */
export function observeRequest(
  ctx: Pick<PipelineContext, 'metrics' | 'log' | 'tracing'>,
  api: ApiName,
  route: string,
  request: Pick<ApiRequest, 'id' | 'headers'>,
  elapsedMs: number,
): RequestObserver {
  const observer = new RequestObserver(ctx.metrics, ctx.log, api, request.id);
  if (ctx.tracing) {
    observer.trace = ctx.tracing.startRequest({
      api,
      route,
      requestId: request.id,
      headers: request.headers,
      receivedAt: performance.now() - elapsedMs,
    });
  }
  return observer;
}

/* How a request ended, recorded the same on every front and transport: the observer's endings. */

/**
 * How a request that threw ends, on every front. A client that went away is logged and counted
 * as 499 `client_gone` and its socket closed (nobody is left to answer); anything else is logged
 * with its status and stable code, then rethrown for the route's error handler to answer in its
 * API's shape (`statusOf` gives the status that shape uses).
 */
export function endFailedRequest(
  ctx: PipelineContext,
  api: ApiName,
  observer: RequestObserver,
  reply: Pick<ApiReply, 'raw' | 'sent' | 'hijack'> | undefined,
  err: unknown,
  statusOf: (error: SluiceError) => number = (error) => error.status,
): SluiceError {
  const error = toSluiceError(err, ctx.config.server.bodyLimitBytes);
  if (error instanceof ClientDisconnected) {
    endClientGone(ctx, api, observer);
    if (reply) {
      if (!reply.sent) reply.hijack();
      reply.raw.destroy();
    }
    return error;
  }
  observer.finish(statusOf(error), 'error', { code: error.code });
  if (reply) throw error;
  return error;
}

/** A client that left before its answer ended: counted once, the same on every front. */
export function endClientGone(ctx: PipelineContext, api: ApiName, observer: RequestObserver): void {
  ctx.metrics.clientGone(api, observer.model);
  observer.finish(499, 'client_gone');
}

/** What a relayed stream's end is told besides its outcome. */
export interface StreamEnd {
  /** Mid-stream resumes, and the workers that served it (logged when there were any). */
  resumes: number;
  workers: readonly string[];
}

/**
 * Records how a relayed stream ended, on every front: a client that left is a 499 (counted
 * once), a failure after the first byte is a 200 `failed` counted under its reason, and the
 * usage is charged to the caller's key.
 */
export async function endRelayedStream(
  ctx: PipelineContext,
  api: ApiName,
  observer: RequestObserver,
  outcome: StreamOutcome,
  end: StreamEnd,
  chargeUsage: (usage: Usage | undefined) => Promise<void>,
): Promise<void> {
  await chargeUsage(outcome.usage);
  observer.trace?.usage(outcome.usage);
  if (outcome.kind === 'client_gone') {
    endClientGone(ctx, api, observer);
    return;
  }
  const fields: Record<string, unknown> =
    outcome.kind === 'failed'
      ? { code: outcome.error.code, reason: outcome.error.reason }
      : { finishReason: outcome.finishReason, usage: outcome.usage };
  if (end.resumes > 0) {
    fields.resumes = end.resumes;
    fields.workers = end.workers;
  }
  if (outcome.kind === 'failed') {
    ctx.metrics.streamFailed(api, observer.model, outcome.error.reason);
    observer.trace?.failed(outcome.error.code);
    observer.finish(200, 'failed', fields);
  } else observer.finish(200, 'completed', fields);
}

/**
 * Counts a run that ended on its own clock (a background response, whose client may be long
 * gone): a failure under its reason, a client that left as a disconnect; nothing for the rest.
 */
export function countRunEnd(
  metrics: PipelineContext['metrics'],
  api: ApiName,
  model: string,
  error: StreamError | ClientDisconnected | undefined,
): void {
  if (!error) return;
  if (error instanceof ClientDisconnected) metrics.clientGone(api, model);
  else metrics.streamFailed(api, model, error.reason);
}
