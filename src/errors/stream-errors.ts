import { SluiceError } from './base.js';

/**
 * The error taxonomy of the engine client (shared/STREAMS.md section 1). Failures after the
 * first byte are expressed inside the stream; each error names its metric `reason`, a value
 * from the closed set below, never a raw upstream string.
 */
export const STREAM_FAILURE_REASONS = [
  'upstream_error_frame',
  'upstream_closed',
  'idle_timeout',
  'deadline',
  'read_error',
  'gateway_error',
  'engine_abort',
  'limit_exceeded',
] as const;
export type StreamFailureReason = (typeof STREAM_FAILURE_REASONS)[number];

/** The base of every failure of an engine's stream; each names its metric `reason`. */
export abstract class StreamError extends SluiceError {
  abstract readonly reason: StreamFailureReason;
}

/** The stream ended (socket closed, EOF, `[DONE]`) before a terminal output arrived. */
export class RequestStreamClosed extends StreamError {
  readonly code = 'request_stream_closed';
  readonly retryable = true;
  readonly reason = 'upstream_closed' as const;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly requestId: string,
    readonly how: 'eof' | 'done' | 'reset' = 'eof',
  ) {
    super(
      how === 'done'
        ? `The engine sent [DONE] for request ${requestId} before a finish_reason.`
        : how === 'reset'
          ? `The engine connection for request ${requestId} was reset before the response finished.`
          : `The engine stream for request ${requestId} ended before a finish_reason.`,
    );
  }
}

/**
 * The engine made no progress (keep-alives are none) for `timeouts.idleMs`: a stream's next output,
 * or a non-streaming answer whole after its headers (its bytes alone are no progress).
 */
export class StreamIdleTimeout extends StreamError {
  readonly code = 'stream_idle_timeout';
  readonly retryable = true;
  readonly reason = 'idle_timeout' as const;
  override readonly status = 504;
  override readonly type = 'server_error' as const;
  constructor(
    readonly requestId: string,
    readonly ms: number,
    what: 'stream' | 'body' = 'stream',
  ) {
    super(
      what === 'body'
        ? `The engine's answer to request ${requestId} was not whole ${ms} ms after its headers.`
        : `The engine sent no output for request ${requestId} for ${ms} ms.`,
    );
  }
}

/** The request passed its deadline, `timeouts.deadlineMs`. */
export class StreamDeadlineExceeded extends StreamError {
  readonly code = 'stream_deadline_exceeded';
  readonly retryable = false;
  readonly reason = 'deadline' as const;
  override readonly status = 504;
  override readonly type = 'server_error' as const;
  constructor(
    readonly requestId: string,
    readonly ms: number,
  ) {
    super(`Request ${requestId} did not finish within its deadline of ${ms} ms.`);
  }
}

/** A chunk that is not the JSON the protocol promises. */
export class MalformedChunk extends StreamError {
  readonly code = 'malformed_chunk';
  readonly retryable = true;
  readonly reason = 'read_error' as const;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly requestId: string,
    detail: string,
  ) {
    super(`The engine sent a malformed chunk for request ${requestId}: ${detail}`);
  }
}

/** Reading the upstream body failed for a reason other than a clean close or a reset. */
export class UpstreamReadError extends StreamError {
  readonly code = 'upstream_read_error';
  readonly retryable = true;
  readonly reason = 'read_error' as const;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly requestId: string,
    detail: string,
  ) {
    super(`Reading the engine response for request ${requestId} failed: ${detail}`);
  }
}

/** The finish reasons that end a choice normally; anything else an engine sends is a failure. */
export const NORMAL_FINISH_REASONS: ReadonlySet<string> = new Set([
  'stop',
  'length',
  'tool_calls',
  'content_filter',
  'function_call',
]);

/**
 * The engine ended a choice with a finish reason that is not a normal ending: vLLM's `abort`
 * (its code 2: the engine aborted the request) and `error` (code 3: the request failed inside
 * the engine), or a value that is no finish reason at all (an object, a number, an unknown
 * string). Never relayed as an ending: it is a failure of the engine, worth another worker.
 */
export class EngineFinishFailure extends StreamError {
  readonly code: 'engine_aborted' | 'engine_error' | 'invalid_finish_reason';
  readonly retryable = true;
  readonly reason = 'engine_abort' as const;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly requestId: string,
    readonly finishReason: unknown,
  ) {
    const shown = describeValue(finishReason);
    super(
      finishReason === 'abort'
        ? `The engine aborted request ${requestId} (finish_reason "abort").`
        : finishReason === 'error'
          ? `The engine failed request ${requestId} (finish_reason "error").`
          : `The engine ended request ${requestId} with an unknown finish_reason ${shown}.`,
    );
    this.code =
      finishReason === 'abort'
        ? 'engine_aborted'
        : finishReason === 'error'
          ? 'engine_error'
          : 'invalid_finish_reason';
  }
  override details(): Record<string, unknown> {
    return { finish_reason: describeValue(this.finishReason) };
  }
}

/** A short, bounded rendering of a value an engine sent, for messages and logs. */
function describeValue(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

const RETRYABLE_STRING_CODES = new Set([
  'internal_error',
  'internal_server_error',
  'server_error',
  'service_unavailable',
  'overloaded',
  'engine_dead',
  'engine_error',
  'timeout',
  'rate_limit_exceeded',
  'too_many_requests',
]);

/** Whether an engine's in-band error is worth retrying elsewhere: 429/5xx-like codes. */
export function isRetryableFrameCode(code: string | number | null, type: string | null): boolean {
  if (typeof code === 'number') return code === 429 || code >= 500;
  if (typeof code === 'string') {
    const asNumber = Number(code);
    if (Number.isInteger(asNumber) && code.trim() !== '') return asNumber === 429 || asNumber >= 500;
    if (RETRYABLE_STRING_CODES.has(code.toLowerCase())) return true;
  }
  return type !== null && /internal|server|unavailable|overload/i.test(type);
}

/** The engine sent an in-band error frame (`data: {"error":{...}}` or `event: error`). */
export class UpstreamErrorFrame extends StreamError {
  readonly code = 'upstream_error_frame';
  readonly retryable: boolean;
  readonly reason = 'upstream_error_frame' as const;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly upstreamCode: string | number | null,
    message: string,
    readonly upstreamType: string | null = null,
  ) {
    super(message);
    this.retryable = isRetryableFrameCode(upstreamCode, upstreamType);
  }
  override details(): Record<string, unknown> {
    return { upstream_code: this.upstreamCode, upstream_type: this.upstreamType };
  }
}

/** The gateway's dispatcher shut down (graceful shutdown deadline reached). */
export class DispatcherClosed extends StreamError {
  readonly code = 'dispatcher_closed';
  readonly retryable = true;
  readonly reason = 'gateway_error' as const;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(message = 'The gateway is shutting down; the stream was ended before it finished.') {
    super(message);
  }
}

/** The engine client (the upstream connection pool of a worker) shut down. */
export class ClientClosed extends StreamError {
  readonly code = 'client_closed';
  readonly retryable = true;
  readonly reason = 'gateway_error' as const;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
}

/** The control / health channel to an engine is gone; the worker is marked unhealthy. */
export class ControlClosed extends StreamError {
  readonly code = 'control_closed';
  readonly retryable = true;
  readonly reason = 'gateway_error' as const;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
}
