import { SluiceError } from './base.js';

/** Authentication, authorisation and the limits of an API key, shaped like OpenAI's. */

/** No API key was sent, or the one sent is not known. */
export class InvalidApiKey extends SluiceError {
  readonly code = 'invalid_api_key';
  readonly retryable = false;
  override readonly status = 401;
  override readonly type = 'authentication_error' as const;
  constructor(reason: 'missing' | 'invalid') {
    super(
      reason === 'missing'
        ? 'You did not provide an API key: send it as `Authorization: Bearer <key>`.'
        : 'Incorrect API key provided.',
    );
  }
}

/** The API key may not use the model the request names. */
export class ModelNotAllowed extends SluiceError {
  readonly code = 'model_not_allowed';
  readonly retryable = false;
  override readonly status = 403;
  override readonly type = 'permission_error' as const;
  override readonly param = 'model';
  constructor(readonly model: string) {
    super(`This API key may not use the model '${model}'.`);
  }
}

/** The key's lifetime token budget is spent (OpenAI answers `insufficient_quota` with a 429). */
export class BudgetExhausted extends SluiceError {
  readonly code = 'insufficient_quota';
  readonly retryable = false;
  override readonly status = 429;
  override readonly type = 'rate_limit_error' as const;
  constructor() {
    super('This API key has used its whole token budget.');
  }
}

/** What a refused rate-limit check tells the client (the rate limiter's `Decision` is one). */
export interface RateLimitRefusal {
  /** Seconds (fractional) until a request could be admitted. */
  readonly retryAfterSeconds: number;
}

/** The key's requests or tokens per minute are spent for now. */
export class RateLimitExceeded extends SluiceError {
  readonly code = 'rate_limit_exceeded';
  readonly retryable = true;
  override readonly status = 429;
  override readonly type = 'rate_limit_error' as const;
  constructor(
    readonly refusal: RateLimitRefusal,
    /** The refusal's `x-ratelimit-*` headers (auth's `formatRateLimitHeaders`). */
    private readonly rateLimitHeaders: Readonly<Record<string, string>> = {},
  ) {
    super(`Rate limit reached for this API key; retry in ${Math.ceil(refusal.retryAfterSeconds)}s.`);
  }
  override headers(): Record<string, string> {
    const retryAfter = String(Math.max(1, Math.ceil(this.refusal.retryAfterSeconds)));
    return { ...this.rateLimitHeaders, 'retry-after': retryAfter };
  }
}

/** The shared rate limiter's backend cannot answer and the limiter fails closed. */
export class RateLimiterUnavailable extends SluiceError {
  readonly code = 'rate_limiter_unavailable';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(options?: { cause?: unknown }) {
    super('The rate limiter is unavailable; try again shortly.', options);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1' };
  }
}
