import type { SluiceError } from '../errors/base.js';
import {
  ClientDisconnected,
  FleetSaturated,
  NoWorkerAvailable,
  QueueFull,
  QueueTimeout,
} from '../errors/http-errors.js';
import { StreamDeadlineExceeded, StreamIdleTimeout } from '../errors/stream-errors.js';
import {
  ContextLengthExceeded,
  UpstreamConnectError,
  UpstreamHeadersTimeout,
  UpstreamHttpError,
} from '../errors/upstream-errors.js';

/**
 * Why a request moved from one model to the next (the `reason` label of
 * `sluice_fallbacks_total`, a closed set).
 */
export type FallbackReason =
  | 'rate_limited'
  | 'unavailable'
  | 'unreachable'
  | 'timeout'
  | 'context_length'
  | 'no_worker'
  | 'stream_cut'
  | 'upstream_error';

/**
 * Whether a failure before the first byte moves a request on to its next model, and why; undefined
 * when it does not. Moving on: retries exhausted on a 429 or 5xx, a connect error or reset, a
 * route that did not answer in time, no worker that can take it (every circuit open, queues
 * full), and at once a context window exceeded. Never: the client's own errors (a 400 or 422 the
 * engine gave, a content-policy refusal: they reach the client as the engine gave them), a client
 * that left, the request's own budget spent.
 */
export function fallbackReason(error: SluiceError): FallbackReason | undefined {
  if (error instanceof ClientDisconnected || error instanceof StreamDeadlineExceeded) return undefined;
  if (error instanceof ContextLengthExceeded) return 'context_length';
  if (error instanceof UpstreamHttpError) {
    if (error.upstreamStatus === 429) return 'rate_limited';
    if (error.upstreamStatus === 503) return 'unavailable';
    return error.upstreamStatus >= 500 ? 'upstream_error' : undefined;
  }
  if (error instanceof UpstreamConnectError) return 'unreachable';
  if (error instanceof UpstreamHeadersTimeout || error instanceof StreamIdleTimeout) return 'timeout';
  if (
    error instanceof NoWorkerAvailable ||
    error instanceof QueueFull ||
    error instanceof QueueTimeout ||
    error instanceof FleetSaturated
  )
    return 'no_worker';
  return error.retryable ? 'upstream_error' : undefined;
}

/** A request body for another model: the same request, naming it. */
export function retargetPayload(payload: string, model: string): string {
  const body = JSON.parse(payload) as Record<string, unknown>;
  body.model = model;
  return JSON.stringify(body);
}
