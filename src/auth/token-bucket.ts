import type { Decision, RateLimits } from './rate-limiter.js';

/** The math shared by the limiters (the Redis one runs the same formulas in Lua). */
export const WINDOW_MS = 60_000;
/** Floating-point refill can land a hair below a whole token; do not refuse for that. */
export const LEVEL_EPSILON = 1e-9;

/** A bucket held `tokens` at `updatedMs`. */
export interface BucketState {
  tokens: number;
  updatedMs: number;
}

/** Bucket levels for one key; null for a dimension without a limit. */
export interface Levels {
  requests: number | null;
  tokens: number | null;
}

/** The level at `nowMs` of a bucket refilling `capacity` per window; an unknown bucket is full. */
export function levelAt(state: BucketState | undefined, capacity: number, nowMs: number): number {
  if (state === undefined) return capacity;
  const elapsedMs = Math.max(0, nowMs - state.updatedMs);
  return Math.min(capacity, state.tokens + (elapsedMs * capacity) / WINDOW_MS);
}

export function canAdmit(levels: Levels): boolean {
  const hasOne = (level: number | null) => level === null || level >= 1 - LEVEL_EPSILON;
  return hasOne(levels.requests) && hasOne(levels.tokens);
}

/** The decision for `levels`, read after the request (if admitted) was taken. */
export function toDecision(limits: RateLimits, levels: Levels, allowed: boolean): Decision {
  const retryAfterSeconds = allowed
    ? 0
    : Math.max(untilOne(levels.requests, limits.rpm), untilOne(levels.tokens, limits.tpm));
  return {
    allowed,
    retryAfterSeconds,
    limitRequests: limits.rpm,
    remainingRequests: remaining(levels.requests),
    resetRequestsSeconds: untilFull(levels.requests, limits.rpm),
    limitTokens: limits.tpm,
    remainingTokens: remaining(levels.tokens),
    resetTokensSeconds: untilFull(levels.tokens, limits.tpm),
  };
}

/** The decision when the levels cannot be known (backend unreachable, failing open). */
export function unknownDecision(limits: RateLimits): Decision {
  return {
    allowed: true,
    retryAfterSeconds: 0,
    limitRequests: limits.rpm,
    remainingRequests: null,
    resetRequestsSeconds: null,
    limitTokens: limits.tpm,
    remainingTokens: null,
    resetTokensSeconds: null,
  };
}

/** Seconds until a bucket of `capacity` refills from `level` to `target`. */
function secondsUntil(level: number, target: number, capacity: number): number {
  return (Math.max(0, target - level) * WINDOW_MS) / capacity / 1000;
}

function untilOne(level: number | null, capacity: number | null): number {
  return level === null || capacity === null ? 0 : secondsUntil(level, 1 - LEVEL_EPSILON, capacity);
}

function untilFull(level: number | null, capacity: number | null): number | null {
  return level === null || capacity === null ? null : secondsUntil(level, capacity, capacity);
}

function remaining(level: number | null): number | null {
  return level === null ? null : Math.floor(Math.max(0, level) + LEVEL_EPSILON);
}
