import { isSluiceError, type SluiceError } from '../errors/base.js';
import { ClientDisconnected, InternalError } from '../errors/http-errors.js';
import {
  EngineFinishFailure,
  MalformedChunk,
  RequestStreamClosed,
  StreamIdleTimeout,
  UpstreamErrorFrame,
  UpstreamReadError,
} from '../errors/stream-errors.js';
import {
  UpstreamAuthRejected,
  UpstreamBadResponse,
  UpstreamConnectError,
  UpstreamHeadersTimeout,
  UpstreamHttpError,
  UpstreamUnexpectedStatus,
} from '../errors/upstream-errors.js';
import { UpstreamLimitExceeded } from '../errors/upstream-limit-errors.js';
import type { AttemptOutcome } from './attempt.js';

const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
]);
const SOCKET_CODES = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED']);

function errorCode(err: unknown): string | undefined {
  const direct = (err as { code?: unknown }).code;
  if (typeof direct === 'string') return direct;
  const cause = (err as { cause?: { code?: unknown } }).cause;
  return typeof cause?.code === 'string' ? cause.code : undefined;
}

/** Whether the error means the worker could not be reached at all (its control channel is gone). */
export function isUnreachable(err: unknown): boolean {
  return err instanceof UpstreamConnectError && err.refused;
}

/**
 * Maps what `pool.request` threw to a typed error. `signal.reason` wins when we aborted the
 * request ourselves (client gone, deadline).
 */
export function classifyRequestError(
  err: unknown,
  signal: AbortSignal,
  workerId: string,
  headersTimeoutMs: number,
): SluiceError {
  if (signal.aborted) {
    const reason: unknown = signal.reason;
    if (isSluiceError(reason)) return reason;
    return new ClientDisconnected();
  }
  if (isSluiceError(err)) return err;
  const code = errorCode(err);
  const message = err instanceof Error ? err.message : String(err);
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return new UpstreamHeadersTimeout(workerId, headersTimeoutMs);
  if (code !== undefined && CONNECT_CODES.has(code)) return new UpstreamConnectError(workerId, message, true);
  if (code !== undefined && SOCKET_CODES.has(code)) return new UpstreamConnectError(workerId, message, false);
  return new InternalError(`Upstream request to ${workerId} failed: ${message}`);
}

/**
 * What an attempt's failure says, for the circuit breakers: a connection that could not be made
 * or broke before any answer is the worker's (its own circuit, shared by all its models); an
 * error status, an error frame, or a stream that broke, stalled or was malformed is a failure of
 * the request's model on that worker (that model's circuit only).
 */
export function outcomeOf(err: SluiceError): AttemptOutcome {
  // The worker itself: unreachable, or refusing the gateway's credentials for every model.
  if (err instanceof UpstreamConnectError || err instanceof UpstreamAuthRejected) return 'worker_failure';
  if (err instanceof UpstreamHttpError) return err.upstreamStatus >= 500 ? 'model_failure' : 'neutral';
  if (err instanceof UpstreamErrorFrame) return err.retryable ? 'model_failure' : 'neutral';
  if (
    err instanceof UpstreamHeadersTimeout ||
    err instanceof UpstreamBadResponse ||
    err instanceof RequestStreamClosed ||
    err instanceof StreamIdleTimeout ||
    err instanceof MalformedChunk ||
    err instanceof UpstreamReadError ||
    err instanceof EngineFinishFailure ||
    err instanceof UpstreamUnexpectedStatus ||
    (err instanceof UpstreamLimitExceeded && err.what !== 'body')
  ) {
    return 'model_failure';
  }
  // Deadlines, client disconnects, shutdown and 4xx say nothing about the worker's health.
  return 'neutral';
}
