import { MAX_RETRY_AFTER_SECONDS, type OpenAIErrorType, SluiceError } from './base.js';

/** Failures of an upstream attempt before its response started: candidates for failover. */

/** The worker refused the connection, or it broke before any answer. */
export class UpstreamConnectError extends SluiceError {
  readonly code = 'upstream_connect_error';
  readonly retryable = true;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly workerId: string,
    detail: string,
    /** True when no connection could be made at all; false when one broke before the response. */
    readonly refused = true,
  ) {
    super(`Could not reach worker ${workerId}: ${detail}`);
  }
}

/** The worker sent no response headers within `timeouts.headersMs`. */
export class UpstreamHeadersTimeout extends SluiceError {
  readonly code = 'upstream_headers_timeout';
  readonly retryable = true;
  override readonly status = 504;
  override readonly type = 'server_error' as const;
  constructor(
    readonly workerId: string,
    readonly ms: number,
  ) {
    super(`Worker ${workerId} sent no response headers within ${ms} ms.`);
  }
}

/**
 * What an engine's HTTP status other than 200 means. Only a 200 is success: a 1xx/2xx/3xx is an
 * engine (or proxy) that does not speak the protocol, and an engine's 401/403/407 is the
 * gateway's own configuration (the worker's `apiKey`), never the client's. Both are 502s that no
 * client SDK can take for an answer; the rest is an UpstreamHttpError.
 */
export function upstreamStatusError(
  workerId: string,
  status: number,
  body: Buffer,
  headers: Record<string, string | string[] | undefined>,
): SluiceError {
  if (status === 401 || status === 403 || status === 407)
    return new UpstreamAuthRejected(workerId, status, body);
  if (status < 400) return new UpstreamUnexpectedStatus(workerId, status);
  if (status === 400 && saysContextExceeded(body)) return new ContextLengthExceeded(workerId, body);
  if (status === 400 && saysPrefillRejected(body)) return new PrefillRejected(workerId, body);
  const contentType = headers['content-type'];
  return new UpstreamHttpError(
    workerId,
    status,
    body,
    typeof contentType === 'string' ? contentType : undefined,
    retryAfterSeconds(headers['retry-after']),
  );
}

/**
 * An engine's `Retry-After` (seconds or an HTTP date) as whole seconds in [1, 3600], or
 * undefined when it sent none that can be read.
 */
export function retryAfterSeconds(header: string | string[] | undefined): number | undefined {
  const value = (Array.isArray(header) ? header[0] : header)?.trim();
  if (value === undefined || value === '') return undefined;
  let seconds: number;
  if (/^\d+$/.test(value)) seconds = Number(value);
  else {
    const at = Date.parse(value);
    if (Number.isNaN(at)) return undefined;
    seconds = Math.ceil((at - Date.now()) / 1000);
  }
  return Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(1, seconds));
}

/**
 * Whether an engine's 400 says the prompt is over the model's context window: OpenAI's code
 * `context_length_exceeded`, or the words vLLM, SGLang and llama.cpp's server use (their 400s
 * carry no stable code).
 */
function saysContextExceeded(body: Buffer): boolean {
  const upstream = parseEngineError(body);
  if (upstream.code === 'context_length_exceeded') return true;
  return /maximum context length|context length (is|of|exceeded)|exceeds? the (model'?s? )?context|prompt is too long|too many tokens/i.test(
    upstream.message ?? '',
  );
}

/**
 * The prompt is over the model's context window (the engine's 400): never retried on the same
 * model, but a fallback with a larger window may take it; the client's 400 when none does.
 */
export class ContextLengthExceeded extends SluiceError {
  readonly code = 'context_length_exceeded';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'messages';
  constructor(
    readonly workerId: string,
    body: Buffer,
  ) {
    const said = parseEngineError(body).message;
    super(
      `The request is over the model's context window${said ? `: ${said}` : '.'} Shorten the messages or lower max_tokens.`,
    );
  }
}

/**
 * The words of an engine's 400 refusing an assistant prefill because of the model's chat template
 * (their 400s carry no stable code): vLLM's (transformers' apply_chat_template, a template that
 * drops the final message; with a Mistral tokenizer, a last message from the assistant), llama.cpp
 * server's (a thinking template), Mistral's validator, and an Anthropic-style provider's. vLLM's
 * "Cannot set both `continue_final_message` and `add_generation_prompt`" is not one: it is the
 * request's own flags (the gateway's continuations never set both).
 */
const PREFILL_REJECTED = [
  /final message does not appear in the chat after applying the chat template/i,
  /assistant response prefill is incompatible with enable_thinking/i,
  /cannot set add_generation_prompt to true when the last message is from the assistant/i,
  /expected last role user or tool \(or assistant with prefix true\)/i,
  /does not support assistant message prefill/i,
];

function saysPrefillRejected(body: Buffer): boolean {
  const message = parseEngineError(body).message ?? '';
  return PREFILL_REJECTED.some((words) => words.test(message));
}

/**
 * The model's chat template refuses an assistant prefill (the engine's 400). The prefill is a
 * continuation of a cut stream, or a client's own `continue_final_message`. Never retried on the
 * model; the gateway remembers it for the model and continues later cuts elsewhere.
 */
export class PrefillRejected extends SluiceError {
  readonly code = 'prefill_rejected';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'messages';
  constructor(
    readonly workerId: string,
    body: Buffer,
  ) {
    const said = parseEngineError(body).message;
    super(
      `The model's chat template does not accept an assistant prefill${said ? `: ${said}` : '.'} End the messages with a user message.`,
    );
  }
}

/** The engine answered with an HTTP error status. 429 and 5xx are retryable elsewhere. */
export class UpstreamHttpError extends SluiceError {
  readonly code = 'upstream_http_error';
  readonly retryable: boolean;
  override readonly status: number;
  override readonly type: OpenAIErrorType;
  override readonly param: string | null;
  constructor(
    readonly workerId: string,
    readonly upstreamStatus: number,
    readonly body: Buffer,
    readonly contentType: string | undefined,
    /** The engine's Retry-After, in seconds (429 and 503). */
    readonly retryAfter?: number | undefined,
  ) {
    super(`Worker ${workerId} answered HTTP ${upstreamStatus}.`);
    this.retryable = upstreamStatus === 429 || upstreamStatus >= 500;
    // An engine's 503 (overloaded, loading, asleep) and 429 reach the client as such, with the
    // engine's Retry-After; its other 5xx are a bad gateway; its other 4xx are the client's answer.
    this.status =
      upstreamStatus === 503 || upstreamStatus === 429 || upstreamStatus < 500 ? upstreamStatus : 502;
    const upstream = parseEngineError(body);
    if (upstream.message)
      this.message = `Worker ${workerId} answered HTTP ${upstreamStatus}: ${upstream.message}`;
    this.upstream = upstream;
    this.param = upstream.param;
    this.type =
      upstreamStatus === 429
        ? 'rate_limit_error'
        : upstreamStatus === 503
          ? 'service_unavailable_error'
          : upstreamStatus >= 500
            ? 'server_error'
            : upstreamStatus === 404
              ? 'not_found_error'
              : 'invalid_request_error';
  }
  private readonly upstream: ReturnType<typeof parseEngineError>;
  override headers(): Record<string, string> {
    return this.upstreamStatus === 429 || this.upstreamStatus === 503
      ? { 'retry-after': String(this.retryAfter ?? 1) }
      : {};
  }
  override details(): Record<string, unknown> {
    return { upstream_status: this.upstreamStatus, upstream_code: this.upstream.code };
  }
}

/** The engine refused the gateway's credentials (401/403/407): a configuration problem of the gateway. */
export class UpstreamAuthRejected extends SluiceError {
  readonly code = 'upstream_auth_failed';
  /** Another worker may hold the right key. */
  readonly retryable = true;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly workerId: string,
    readonly upstreamStatus: number,
    body: Buffer,
  ) {
    super(
      `Worker ${workerId} refused the gateway's credentials (HTTP ${upstreamStatus}); check the worker's apiKey in the gateway's configuration.`,
    );
    const upstream = parseEngineError(body);
    if (upstream.message) this.message += ` The engine said: ${upstream.message}`;
  }
  override details(): Record<string, unknown> {
    return { upstream_status: this.upstreamStatus };
  }
}

/** The engine answered a status that is neither 200 nor an error (1xx, 201-299, 3xx). */
export class UpstreamUnexpectedStatus extends SluiceError {
  readonly code = 'upstream_unexpected_status';
  readonly retryable = true;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly workerId: string,
    readonly upstreamStatus: number,
  ) {
    super(`Worker ${workerId} answered HTTP ${upstreamStatus}, not 200: it is not an answer.`);
  }
  override details(): Record<string, unknown> {
    return { upstream_status: this.upstreamStatus };
  }
}

/** Reads the message of an engine's error body (OpenAI `{"error":{...}}` or vLLM's bare shape). */
function parseEngineError(body: Buffer): {
  message: string | undefined;
  param: string | null;
  code: string | number | null;
} {
  const empty = { message: undefined, param: null, code: null };
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    const text = body.toString('utf8').trim();
    return { ...empty, message: text.length > 0 ? text.slice(0, 500) : undefined };
  }
  if (typeof parsed !== 'object' || parsed === null) return empty;
  const outer = parsed as Record<string, unknown>;
  const fields = (typeof outer.error === 'object' && outer.error !== null ? outer.error : outer) as Record<
    string,
    unknown
  >;
  return {
    message: typeof fields.message === 'string' ? fields.message : undefined,
    param: typeof fields.param === 'string' ? fields.param : null,
    code: typeof fields.code === 'string' || typeof fields.code === 'number' ? fields.code : null,
  };
}

/** A non-streaming response whose body is not valid JSON. */
export class UpstreamBadResponse extends SluiceError {
  readonly code = 'upstream_bad_response';
  readonly retryable = true;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly workerId: string,
    detail: string,
  ) {
    super(`Worker ${workerId} sent an invalid response: ${detail}`);
  }
}
