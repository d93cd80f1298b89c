import type { Decision } from './rate-limiter.js';

/**
 * The `x-ratelimit-*` headers as OpenAI sends them (resets as durations like `1s`, `6m0s`,
 * `20ms`), plus `retry-after` in whole seconds on a refusal. Unknown or unlimited values are left out.
 */
export function formatRateLimitHeaders(decision: Decision): Record<string, string> {
  const headers: Record<string, string> = {};
  const put = (name: string, value: string | undefined) => {
    if (value !== undefined) headers[name] = value;
  };
  put('x-ratelimit-limit-requests', integer(decision.limitRequests));
  put('x-ratelimit-remaining-requests', integer(decision.remainingRequests));
  put('x-ratelimit-reset-requests', duration(decision.resetRequestsSeconds));
  put('x-ratelimit-limit-tokens', integer(decision.limitTokens));
  put('x-ratelimit-remaining-tokens', integer(decision.remainingTokens));
  put('x-ratelimit-reset-tokens', duration(decision.resetTokensSeconds));
  if (!decision.allowed) headers['retry-after'] = String(Math.max(1, Math.ceil(decision.retryAfterSeconds)));
  return headers;
}

/** `20ms`, `8.64s`, `6m0s`: rounded up to the millisecond, so a client never retries too early. */
export function formatResetDuration(seconds: number): string {
  const totalMs = Math.ceil(seconds * 1000);
  if (totalMs <= 0) return '0s';
  if (totalMs < 1000) return `${totalMs}ms`;
  const minutes = Math.floor(totalMs / 60_000);
  const rest = `${(totalMs - minutes * 60_000) / 1000}s`;
  return minutes > 0 ? `${minutes}m${rest}` : rest;
}

function integer(value: number | null): string | undefined {
  return value === null ? undefined : String(Math.floor(value));
}

function duration(seconds: number | null): string | undefined {
  return seconds === null ? undefined : formatResetDuration(seconds);
}
