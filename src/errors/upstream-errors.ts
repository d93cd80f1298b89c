import { type OpenAIErrorType, SluiceError } from './base.js';

/** Failures of an upstream attempt before its response started: candidates for failover. */

export class UpstreamConnectError extends SluiceError {
  readonly code = 'upstream_connect_error';
  readonly retryable = true;
  override readonly status = 502;
  constructor(
    readonly workerId: string,
    detail: string,
    /** True when no connection could be made at all; false when one broke before the response. */
    readonly refused = true,
  ) {
    super(`Could not reach worker ${workerId}: ${detail}`);
  }
}

export class UpstreamHeadersTimeout extends SluiceError {
  readonly code = 'upstream_headers_timeout';
  readonly retryable = true;
  override readonly status = 504;
  constructor(
    readonly workerId: string,
    readonly ms: number,
  ) {
    super(`Worker ${workerId} sent no response headers within ${ms} ms.`);
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
  ) {
    super(`Worker ${workerId} answered HTTP ${upstreamStatus}.`);
    this.retryable = upstreamStatus === 429 || upstreamStatus >= 500;
    // An engine's 5xx is a bad gateway from the client's side; its 4xx and 429 are the client's answer.
    this.status = upstreamStatus >= 500 ? 502 : upstreamStatus;
    const upstream = parseEngineError(body);
    if (upstream.message)
      this.message = `Worker ${workerId} answered HTTP ${upstreamStatus}: ${upstream.message}`;
    this.upstream = upstream;
    this.param = upstream.param;
    this.type =
      upstreamStatus === 429
        ? 'rate_limit_error'
        : upstreamStatus >= 500
          ? 'server_error'
          : upstreamStatus === 404
            ? 'not_found_error'
            : 'invalid_request_error';
  }
  private readonly upstream: ReturnType<typeof parseEngineError>;
  override headers(): Record<string, string> {
    return this.upstreamStatus === 429 ? { 'retry-after': this.upstream.retryAfter ?? '1' } : {};
  }
  override details(): Record<string, unknown> {
    return { upstream_status: this.upstreamStatus, upstream_code: this.upstream.code };
  }
}

/** Reads the message of an engine's error body (OpenAI `{"error":{...}}` or vLLM's bare shape). */
function parseEngineError(body: Buffer): {
  message: string | undefined;
  param: string | null;
  code: string | number | null;
  retryAfter: string | undefined;
} {
  const empty = { message: undefined, param: null, code: null, retryAfter: undefined };
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
    retryAfter: undefined,
  };
}

/** A non-streaming response whose body is not valid JSON. */
export class UpstreamBadResponse extends SluiceError {
  readonly code = 'upstream_bad_response';
  readonly retryable = true;
  override readonly status = 502;
  constructor(
    readonly workerId: string,
    detail: string,
  ) {
    super(`Worker ${workerId} sent an invalid response: ${detail}`);
  }
}
