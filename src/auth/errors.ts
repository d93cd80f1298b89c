import { type OpenAIErrorType, SluiceError } from '../errors/base.js';
import { formatRateLimitHeaders } from './rate-limit-headers.js';
import type { Decision } from './rate-limiter.js';

/** The errors of authentication, authorisation and limits, shaped like OpenAI's. */

export class InvalidApiKey extends SluiceError {
  readonly code = 'invalid_api_key';
  readonly retryable = false;
  override readonly status = 401;
  override readonly type: OpenAIErrorType = 'authentication_error';
  constructor(reason: 'missing' | 'invalid') {
    super(
      reason === 'missing'
        ? 'You did not provide an API key: send it as `Authorization: Bearer <key>`.'
        : 'Incorrect API key provided.',
    );
  }
}

export class ModelNotAllowed extends SluiceError {
  readonly code = 'model_not_allowed';
  readonly retryable = false;
  override readonly status = 403;
  override readonly type: OpenAIErrorType = 'permission_error';
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
  override readonly type: OpenAIErrorType = 'rate_limit_error';
  constructor() {
    super('This API key has used its whole token budget.');
  }
}

export class RateLimitExceeded extends SluiceError {
  readonly code = 'rate_limit_exceeded';
  readonly retryable = true;
  override readonly status = 429;
  override readonly type: OpenAIErrorType = 'rate_limit_error';
  constructor(readonly decision: Decision) {
    super(`Rate limit reached for this API key; retry in ${Math.ceil(decision.retryAfterSeconds)}s.`);
  }
  override headers(): Record<string, string> {
    return formatRateLimitHeaders(this.decision);
  }
}

/** The shared rate limiter's backend cannot answer and the limiter fails closed. */
export class RateLimiterUnavailable extends SluiceError {
  readonly code = 'rate_limiter_unavailable';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type: OpenAIErrorType = 'service_unavailable_error';
  constructor(options?: { cause?: unknown }) {
    super('The rate limiter is unavailable; try again shortly.', options);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1' };
  }
}
