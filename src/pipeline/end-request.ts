import type { SluiceError } from '../errors/base.js';
import { toSluiceError } from '../errors/from-thrown.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { StreamError } from '../errors/stream-errors.js';
import type { ApiName } from '../observability/metrics.js';
import type { Usage } from '../streams/chat-stream-tracker.js';
import type { PipelineContext } from './context.js';
import type { ApiReply } from './exchange.js';
import type { StreamOutcome } from './relay.js';
import type { RequestObserver } from './request-observer.js';

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
