/**
 * What the waits between a request's attempts are made of: a random source and a sleep, given to
 * the gateway so that tests assert the schedule by the values asked for, not by the wall clock.
 */
export interface RetryTiming {
  /** A number in [0, 1), as Math.random. */
  random(): number;
  /** Waits `ms`, or less when `signal` aborts (it never rejects). */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

/** The real ones: Math.random and a timer. */
export const REAL_TIMING: RetryTiming = { random: Math.random, sleep: abortableSleep };

/**
 * The share of a wait taken off at random: a wait is its nominal value times a factor in
 * (1 - JITTER, 1]. Clients and replicas refused at the same instant then come back spread over a
 * quarter of the wait rather than together, and none comes back sooner than three quarters of it
 * (full jitter, in [0, nominal], would let some retry at once: the burst on a refusing route the
 * backoff is there to avoid). The OpenAI SDKs jitter their retries the same way.
 */
const JITTER = 0.25;

/**
 * The wait before the `k`-th retry (from 0) on a route already tried: `baseMs` doubled per retry
 * up to `maxMs`, jittered. With the defaults (`retry.backoffMs` 500, `retry.maxBackoffMs` 8,000)
 * that is about 0.5 s, then 1 s, 2 s...: what a well-behaved client waits after a 429 without
 * Retry-After (the OpenAI SDKs: 0.5 s doubling to 8 s), so the gateway's retries add no burst of
 * their own to an engine that is refusing for load.
 */
export function backoffMs(k: number, baseMs: number, maxMs: number, random: () => number): number {
  const nominal = Math.min(maxMs, baseMs * 2 ** k);
  return nominal * (1 - JITTER * random());
}

function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
