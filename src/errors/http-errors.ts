import { type OpenAIErrorType, SluiceError } from './base.js';

/** Errors raised before anything is sent upstream: bad requests, routing, admission. */

export class InvalidRequest extends SluiceError {
  readonly code: string;
  readonly retryable = false;
  override readonly status: number;
  override readonly type: OpenAIErrorType = 'invalid_request_error';
  override readonly param: string | null;
  constructor(message: string, param: string | null = null, code = 'invalid_request', status = 400) {
    super(message);
    this.code = code;
    this.param = param;
    this.status = status;
  }
}

/**
 * A request asks for more output tokens (`max_tokens`, `max_completion_tokens`,
 * `max_output_tokens`) than its model allows: `models.<m>.maxOutputTokens`, else
 * `limits.maxOutputTokens`, within the engine's `max_model_len` when known. Refused rather than
 * clamped: a client that asked for N tokens learns it cannot have them, as OpenAI answers it.
 */
export class MaxTokensTooLarge extends SluiceError {
  readonly code = 'max_tokens_too_large';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param: string;
  constructor(
    param: string,
    readonly requested: number,
    readonly limit: number,
  ) {
    super(
      `'${param}' is too large: ${requested}. This model supports at most ${limit} output tokens; ask for ${limit} or fewer, or leave it out.`,
    );
    this.param = param;
  }
  override details(): Record<string, unknown> {
    return { max_allowed: this.limit };
  }
}

/**
 * A `function_call_output` whose `call_id` answers no `function_call` before it: neither in the
 * request's input nor in what it continues (the `previous_response_id` chain, the conversation).
 * An engine shown a tool result without its call answers nonsense or fails.
 */
export class UnmatchedCallOutput extends SluiceError {
  readonly code = 'unmatched_call_id';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param: string;
  constructor(
    readonly index: number,
    readonly callId: string,
  ) {
    super(
      `No function call found for the function_call_output with call_id '${callId.slice(0, 128)}' (input[${index}]): it must answer a function_call earlier in the input or in the response it continues.`,
    );
    this.param = `input[${index}].call_id`;
  }
}

/** A list's `after` cursor names no item of the list (a 400, as a bad `starting_after` of a replay is). */
export class UnknownCursor extends SluiceError {
  readonly code = 'cursor_not_found';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'after';
  constructor(readonly cursor: string) {
    super(`Invalid value for 'after': no item of this list has the id '${cursor.slice(0, 128)}'.`);
  }
}

/**
 * A request body in a content coding the gateway does not decode (`Content-Encoding: gzip`, ...):
 * 415, with `Accept-Encoding: identity` saying what it takes (RFC 9110, section 15.5.16).
 */
export class UnsupportedContentEncoding extends SluiceError {
  readonly code = 'unsupported_content_encoding';
  readonly retryable = false;
  override readonly status = 415;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'content-encoding';
  constructor(encoding: string) {
    super(
      `Content-Encoding '${encoding.slice(0, 64)}' is not supported: send the request body uncompressed (identity).`,
    );
  }
  override headers(): Record<string, string> {
    return { 'accept-encoding': 'identity' };
  }
}

export class ModelNotFound extends SluiceError {
  readonly code = 'model_not_found';
  readonly retryable = false;
  override readonly status = 404;
  override readonly type = 'not_found_error' as const;
  override readonly param = 'model';
  constructor(readonly model: string) {
    super(`The model '${model}' does not exist or is not served by any worker.`);
  }
}

export class NotFound extends SluiceError {
  readonly code: string;
  readonly retryable = false;
  override readonly status = 404;
  override readonly type = 'not_found_error' as const;
  override readonly param: string | null;
  constructor(message: string, code = 'not_found', param: string | null = null) {
    super(message);
    this.code = code;
    this.param = param;
  }
}

export class PayloadTooLarge extends SluiceError {
  readonly code = 'payload_too_large';
  readonly retryable = false;
  override readonly status = 413;
  override readonly type = 'invalid_request_error' as const;
  constructor(readonly limitBytes: number) {
    super(`Request body is larger than the limit of ${limitBytes} bytes.`);
  }
}

export class Conflict extends SluiceError {
  readonly code: string;
  readonly retryable = false;
  override readonly status = 409;
  override readonly type = 'invalid_request_error' as const;
  constructor(message: string, code = 'conflict') {
    super(message);
    this.code = code;
  }
}

/**
 * A WebSocket connection's streams (`stream_id` lanes) are all taken, or one stream's queue of
 * `response.create` messages is full: the client sends it again once one has ended.
 */
export class StreamLimitReached extends SluiceError {
  readonly code: 'too_many_streams' | 'stream_queue_full';
  readonly retryable = true;
  override readonly status = 429;
  override readonly type = 'rate_limit_error' as const;
  override readonly param = 'stream_id';
  constructor(message: string, code: 'too_many_streams' | 'stream_queue_full') {
    super(message);
    this.code = code;
  }
}

/** No worker can take the request now: all unhealthy, circuits open, or queues full. */
export class NoWorkerAvailable extends SluiceError {
  readonly code = 'no_worker_available';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(
    readonly model: string,
    readonly retryAfterSeconds = 1,
    reason = 'no healthy worker',
  ) {
    super(`No worker is available for model '${model}' (${reason}).`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': String(this.retryAfterSeconds) };
  }
}

export class QueueFull extends SluiceError {
  readonly code = 'queue_full';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(
    readonly workerId: string,
    readonly retryAfterSeconds = 1,
  ) {
    super(`All workers for this model are at capacity and their queues are full.`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': String(this.retryAfterSeconds) };
  }
}

export class QueueTimeout extends SluiceError {
  readonly code = 'queue_timeout';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(
    readonly waitedMs: number,
    readonly retryAfterSeconds = 1,
  ) {
    super(`The request waited ${waitedMs} ms for a free worker slot and timed out.`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': String(this.retryAfterSeconds) };
  }
}

export class GatewayShuttingDown extends SluiceError {
  readonly code = 'gateway_shutting_down';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor() {
    super('The gateway is shutting down and accepts no new requests.');
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1', connection: 'close' };
  }
}

/**
 * The gateway process running a background response stopped (crash, kill, lost host) before it
 * ended; a live replica ended it once that process's lease lapsed. Never thrown over HTTP: it is
 * the `error` of the failed response and of its terminal event.
 */
export class GatewayRestarted extends SluiceError {
  readonly code = 'gateway_restarted';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor() {
    super('The gateway process running this response stopped before it finished; it was ended as failed.');
  }
}

/** Anything we did not foresee. The message is generic on purpose; details go to the log. */
export class InternalError extends SluiceError {
  readonly code = 'internal_error';
  readonly retryable = false;
  constructor(message = 'The gateway hit an internal error.') {
    super(message);
  }
}

/** The client went away before the response ended. Never sent (nobody is listening); logged and counted. */
export class ClientDisconnected extends SluiceError {
  readonly code = 'client_disconnected';
  readonly retryable = false;
  override readonly status = 499;
  constructor() {
    super('The client closed the connection before the response ended.');
  }
}
