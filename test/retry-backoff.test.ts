import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { backoffMs, type RetryTiming } from '../src/dispatch/retry-backoff.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, perTest, post } from './helpers/gateway.js';

/**
 * The waits between a request's attempts (issue 49, item 9): a 429 without Retry-After is
 * retried on a route already tried only after a jittered exponential backoff (about 0.5 s, then
 * 1 s, as a well-behaved client waits), at once on a worker not tried yet, and never past the
 * request's one budget. The gateway is given its random source and sleep: the schedule is
 * asserted by the values it asked to wait and when (after how many engine attempts), never by
 * the wall clock; the injected sleep returns at once.
 */

/** The defaults, as a gateway without a `retry` section has them (the test helper sets a 5 ms backoff). */
const { backoffMs: BASE, maxBackoffMs: CAP } = parseConfig({}).retry;

interface Wait {
  ms: number;
  /** Engine attempts made when the wait began. */
  after: number;
}

/** A timing whose random source answers `draws` in turn and whose sleep records the wait and returns at once. */
function recorded(draws: number[], attempts: () => number): { timing: RetryTiming; waits: Wait[] } {
  const waits: Wait[] = [];
  let i = 0;
  return {
    waits,
    timing: {
      random: () => draws[i++ % draws.length]!,
      sleep: async (ms) => {
        waits.push({ ms, after: attempts() });
      },
    },
  };
}

describe('the backoff between attempts', () => {
  const fx = perTest();

  it('defaults to 0.5 s doubling to 8 s, less up to a quarter at random', () => {
    expect({ base: BASE, cap: CAP }).toEqual({ base: 500, cap: 8_000 });
    expect([0, 1, 2, 3, 4, 5].map((k) => backoffMs(k, BASE, CAP, () => 0))).toEqual([
      500, 1_000, 2_000, 4_000, 8_000, 8_000,
    ]);
    // The jitter takes off at most a quarter: never a retry at once.
    expect(backoffMs(0, BASE, CAP, () => 0.999_999)).toBeGreaterThan(375);
    expect(backoffMs(1, BASE, CAP, () => 0.5)).toBe(875);
  });

  async function oneWorkerOf429s(input: Parameters<typeof fx.gateway>[0], draws: number[]) {
    const [worker] = (await fx.mocks(1)) as [MockWorker];
    worker.setFault('http_429,no_retry_after');
    const { timing, waits } = recorded(draws, () => worker.stats.requests);
    const gateway = await fx.gateway(
      {
        workers: [{ url: worker.url }],
        ...input,
        retry: { backoffMs: BASE, maxBackoffMs: CAP, ...input?.retry },
      },
      { retryTiming: timing },
    );
    return { worker, gateway, waits };
  }

  it('a 429 without Retry-After from the only worker: retried after 0.5 s, then 1 s, then 2 s (jittered), then the 429', async () => {
    const { worker, gateway, waits } = await oneWorkerOf429s({ retry: { maxAttempts: 4 } }, [0, 1, 0.5]);
    const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }));
    expect(res.status).toBe(429);
    expect(worker.stats.requests).toBe(4);
    // Each wait comes between two attempts, growing: 500 × (1 - 0), 1000 × (1 - 0.25), 2000 × (1 - 0.125).
    expect(waits).toEqual([
      { ms: 500, after: 1 },
      { ms: 750, after: 2 },
      { ms: 1_750, after: 3 },
    ]);
  });

  it('a wait that would outlast the request’s budget is not made: the 429 answers within it', async () => {
    const { worker, gateway, waits } = await oneWorkerOf429s(
      { retry: { maxAttempts: 4 }, timeouts: { deadlineMs: 1_000 } },
      [0],
    );
    const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }));
    expect(res.status).toBe(429);
    // 500 ms fits in the 1 s budget; the next, 1 s, does not.
    expect(waits).toEqual([{ ms: 500, after: 1 }]);
    expect(worker.stats.requests).toBe(2);
  });

  it('a worker not tried yet is tried at once; only a route already tried waits', async () => {
    const workers = await fx.mocks(2);
    for (const w of workers) w.setFault('http_429,no_retry_after');
    const attempts = () => workers.reduce((n, w) => n + w.stats.requests, 0);
    const { timing, waits } = recorded([0], attempts);
    /** Each worker's attempts when the first wait began. */
    let atFirstWait: number[] = [];
    const sleep = timing.sleep;
    timing.sleep = (ms, signal) => {
      if (atFirstWait.length === 0) atFirstWait = workers.map((w) => w.stats.requests);
      return sleep(ms, signal);
    };
    const gateway = await fx.gateway(
      {
        workers: workers.map((w) => ({ url: w.url })),
        retry: { maxAttempts: 4, backoffMs: BASE, maxBackoffMs: CAP },
      },
      { retryTiming: timing },
    );
    const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }));
    expect(res.status).toBe(429);
    expect(attempts()).toBe(4);
    // The second attempt went to the other worker without a wait; back on tried routes (whichever
    // the policy picks), 0.5 s then 1 s.
    expect(atFirstWait).toEqual([1, 1]);
    expect(waits).toEqual([
      { ms: 500, after: 2 },
      { ms: 1_000, after: 3 },
    ]);
  });

  it('an engine’s Retry-After longer than the backoff is waited instead', async () => {
    const [worker] = (await fx.mocks(1)) as [MockWorker];
    worker.setFault('http_429:2');
    const { timing, waits } = recorded([0], () => worker.stats.requests);
    const gateway = await fx.gateway(
      { workers: [{ url: worker.url }], retry: { maxAttempts: 2, backoffMs: BASE, maxBackoffMs: CAP } },
      { retryTiming: timing },
    );
    const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }));
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('2');
    expect(waits).toEqual([{ ms: 2_000, after: 1 }]);
  });
});
