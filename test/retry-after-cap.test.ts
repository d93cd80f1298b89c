import { describe, expect, it } from 'vitest';
import { answerError } from '../src/api/error-handler.js';
import { RateLimitExceeded } from '../src/errors/auth-errors.js';
import { MAX_RETRY_AFTER_SECONDS } from '../src/errors/base.js';
import { FleetSaturated } from '../src/errors/http-errors.js';

/** What answerError writes, captured. */
function written(err: unknown): Record<string, string> {
  const headers: Record<string, string> = {};
  const reply = {
    sent: false,
    raw: { headersSent: false },
    code: () => reply,
    header: (name: string, value: string) => {
      headers[name] = value;
      return reply;
    },
    send: () => reply,
  };
  const log = { error: () => {}, info: () => {} };
  answerError(
    err,
    { id: 'r1', method: 'POST', route: '/v1/chat/completions' },
    reply as never,
    log as never,
    1e6,
  );
  return headers;
}

describe('every Retry-After sluice writes is capped', () => {
  it('caps flow control’s estimate (fleet_saturated) at 3,600 s where error responses are written', () => {
    expect(MAX_RETRY_AFTER_SECONDS).toBe(3600);
    const saturated = new FleetSaturated('m', 10, 95_946, 'the queue is full');
    expect(written(saturated)['retry-after']).toBe('3600');
    expect(saturated.responseHeaders()['retry-after']).toBe('3600');
    expect(written(new FleetSaturated('m', 10, 7, 'the queue is full'))['retry-after']).toBe('7');
  });

  it('caps a rate limit’s refill wait too, and keeps its other headers', () => {
    const refused = new RateLimitExceeded(
      { retryAfterSeconds: 86_400 * 30 },
      { 'x-ratelimit-limit-requests': '1' },
    );
    const headers = written(refused);
    expect(headers['retry-after']).toBe('3600');
    expect(headers['x-ratelimit-limit-requests']).toBe('1');
  });
});
