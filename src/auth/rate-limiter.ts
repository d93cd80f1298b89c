/**
 * Per-key rate limits: a token bucket of requests and one of tokens per key, each holding up to
 * its per-minute limit and refilling continuously at limit / 60 s. `check` takes one request
 * before the request is served; the tokens a request used are only known from the engine's
 * usage afterwards, so `consumeTokens` deducts them then and may drive the token bucket below
 * zero, which refuses further requests until it has refilled above one token.
 */
export interface RateLimits {
  /** Requests per minute; null means unlimited. */
  rpm: number | null;
  /** Tokens per minute; null means unlimited. */
  tpm: number | null;
}

/**
 * The outcome of a check, with the numbers of OpenAI's `x-ratelimit-*` headers (see
 * `rateLimitHeaders`). A null number means the dimension is unlimited, or unknown because the
 * limiter's backend was unreachable and it failed open: omit that header.
 */
export interface Decision {
  allowed: boolean;
  /** Seconds (fractional) until a refused request could be admitted; 0 when allowed. */
  retryAfterSeconds: number;
  limitRequests: number | null;
  /** Whole requests left after this one. */
  remainingRequests: number | null;
  /** Seconds until the request bucket is full again. */
  resetRequestsSeconds: number | null;
  limitTokens: number | null;
  /** Whole tokens left (0 while the bucket is negative). */
  remainingTokens: number | null;
  /** Seconds until the token bucket is full again. */
  resetTokensSeconds: number | null;
}

export interface RateLimiter {
  /**
   * Admits or refuses one request of `keyId`, taking one from its request bucket when admitted.
   * `now` (Unix ms) replaces the clock where the implementation uses the local one.
   */
  check(keyId: string, limits: RateLimits, now?: number): Promise<Decision>;
  /** Deducts the tokens a finished request used. Never throws for an unreachable backend. */
  consumeTokens(keyId: string, limits: RateLimits, tokens: number, now?: number): Promise<void>;
  close(): Promise<void>;
}

/** Throws TypeError unless each limit is null or a positive finite number. */
export function assertValidLimits(limits: RateLimits): void {
  for (const [name, value] of Object.entries(limits)) {
    if (value !== null && !(typeof value === 'number' && Number.isFinite(value) && value > 0)) {
      throw new TypeError(`rate limit ${name} must be null or a positive number, got ${String(value)}`);
    }
  }
}

export function assertValidTokenCount(tokens: number): void {
  if (!Number.isSafeInteger(tokens) || tokens < 0) {
    throw new TypeError(`token count must be a non-negative integer, got ${tokens}`);
  }
}

export function isUnlimited(limits: RateLimits): boolean {
  return limits.rpm === null && limits.tpm === null;
}
