/**
 * The root of every error sluice raises on purpose. Each error carries a stable
 * machine-readable `code` (never reworded once released), a `retryable` flag that the
 * dispatcher uses to decide on failover, and the HTTP status and OpenAI error `type`
 * it maps to when it can still be expressed as an HTTP response.
 *
 * One class per meaning: each class fixes its code (or a closed union of codes of one meaning),
 * its status, its type and its retryable flag as literal types; no constructor takes a status.
 * The registry of every code is docs/ERRORS.md, generated from these classes
 * (`npx tsx scripts/error-registry.ts --write`) and checked by test/error-registry.test.ts.
 */
export type OpenAIErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'server_error'
  | 'service_unavailable_error';

export interface OpenAIErrorBody {
  error: {
    message: string;
    type: OpenAIErrorType | string;
    param: string | null;
    code: string | null;
    [extra: string]: unknown;
  };
}

/**
 * The longest `Retry-After` sluice sends, in seconds: whatever computed it (flow control's
 * estimate, a rate limit's refill, an engine's own, which is read capped the same).
 */
export const MAX_RETRY_AFTER_SECONDS = 3600;

/** A `Retry-After` value as sent: whole seconds in [0, MAX_RETRY_AFTER_SECONDS]; undefined if it is no number. */
export function cappedRetryAfter(value: string): string | undefined {
  const seconds = Number(value);
  if (value.trim() === '' || Number.isNaN(seconds)) return undefined;
  return String(Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(0, Math.ceil(seconds))));
}

export abstract class SluiceError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
  abstract readonly status: number;
  abstract readonly type: OpenAIErrorType;
  readonly param: string | null = null;
  /** Extra headers to send with an HTTP error response (Retry-After, ...): what a class adds. */
  headers(): Record<string, string> {
    return {};
  }
  /**
   * The headers an error response is written with: the one place every route takes them from
   * (so every `Retry-After` sluice writes is capped at MAX_RETRY_AFTER_SECONDS).
   */
  responseHeaders(): Record<string, string> {
    const headers = this.headers();
    const retryAfter = headers['retry-after'];
    if (retryAfter === undefined) return headers;
    const capped = cappedRetryAfter(retryAfter);
    const { 'retry-after': _, ...rest } = headers;
    return capped === undefined ? rest : { ...rest, 'retry-after': capped };
  }
  /** Extra fields placed inside the `error` object of the wire body. */
  details(): Record<string, unknown> {
    return {};
  }
  toBody(): OpenAIErrorBody {
    return {
      error: {
        message: this.message,
        type: this.type,
        param: this.param,
        code: this.code,
        ...this.details(),
      },
    };
  }
}

export function isSluiceError(err: unknown): err is SluiceError {
  return err instanceof SluiceError;
}
