import { describe, expect, it } from 'vitest';
import { StoreError } from '../src/errors/storage-errors.js';
import { storeError } from '../src/storage/error-mapping.js';
import { retryPolicy, withRetry } from '../src/storage/postgres-retry.js';

const windows = { readMs: 300, writeMs: 600 };
const refused = () =>
  storeError(
    'op',
    'store_unavailable',
    Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
  );
const cut = () => storeError('op', 'store_unavailable', new Error('Connection terminated unexpectedly'));
const duplicate = () => storeError('op', 'store_duplicate');

/** An attempt that fails with each of `failures` in turn, then returns 'ok'. */
function attempts(...failures: StoreError[]) {
  let calls = 0;
  const attempt = async () => {
    const failure = failures[calls++];
    if (failure) throw failure;
    return 'ok';
  };
  return { attempt, calls: () => calls };
}

describe('PostgreSQL retry policies', () => {
  it('names the policy of each operation; an unknown one is retried only when nothing was sent', () => {
    expect(retryPolicy('getResponse')).toBe('read');
    expect(retryPolicy('listKeys')).toBe('read');
    expect(retryPolicy('updateResponse')).toBe('idempotent');
    expect(retryPolicy('insertResponse')).toBe('insert');
    expect(retryPolicy('addUsage')).toBe('unsent');
    expect(retryPolicy('migrate')).toBe('none');
    expect(retryPolicy('someNewWrite')).toBe('unsent');
  });

  it('retries an unreachable server until it answers', async () => {
    const { attempt, calls } = attempts(refused(), cut(), refused());
    expect(await withRetry('updateResponse', windows, attempt, () => 'done')).toBe('ok');
    expect(calls()).toBe(4);
  });

  it('gives up after its window with the typed error; a read sooner than a write', async () => {
    // An injected clock: the sleeps move it, so the schedule is the values waited, not the wall clock.
    const schedule: Record<string, { waits: number[]; calls: number; ended: number }> = {};
    for (const operation of ['getResponse', 'updateResponse'] as const) {
      let now = 1_000;
      const waits: number[] = [];
      const clock = {
        now: () => now,
        sleep: async (ms: number) => {
          waits.push(ms);
          now += ms;
        },
      };
      let calls = 0;
      let windowEnd = 0;
      const failing = async (until: number) => {
        calls++;
        windowEnd = until;
        throw refused();
      };
      await expect(withRetry(operation, { ...windows, clock }, failing, () => 'done')).rejects.toMatchObject({
        code: 'store_unavailable',
        retryable: true,
      });
      // Each attempt is told the window's end, on the same clock.
      expect(windowEnd - 1_000).toBe(operation === 'getResponse' ? windows.readMs : windows.writeMs);
      schedule[operation] = { waits, calls, ended: now - 1_000 };
    }
    // Backing off, doubling, for as long as the next wait still ends inside the window.
    expect(schedule.getResponse).toEqual({ waits: [50, 100], calls: 3, ended: 150 });
    expect(schedule.updateResponse).toEqual({ waits: [50, 100, 200], calls: 4, ended: 350 });
  });

  it('waits on the monotonic clock by default: a wall-clock step does not end its window', async () => {
    const real = Date.now;
    let calls = 0;
    const flaky = async () => {
      if (++calls > 1) return 'ok';
      // The wall clock steps an hour ahead during the first attempt.
      Date.now = () => real() + 3_600_000;
      throw refused();
    };
    try {
      expect(await withRetry('getResponse', windows, flaky, () => 'done')).toBe('ok');
    } finally {
      Date.now = real;
    }
    expect(calls).toBe(2);
  });

  it('an insert that meets its own unacknowledged row counts as done', async () => {
    const { attempt } = attempts(cut(), duplicate());
    expect(await withRetry('insertResponse', windows, attempt, () => 'done')).toBe('done');
    // A duplicate with no earlier unknown outcome is a real duplicate.
    await expect(
      withRetry('insertResponse', windows, attempts(duplicate()).attempt, () => 'done'),
    ).rejects.toMatchObject({
      code: 'store_duplicate',
    });
  });

  it('an increment is retried only when it never reached the server; migrate never', async () => {
    expect(await withRetry('addUsage', windows, attempts(refused()).attempt, () => 'done')).toBe('ok');
    await expect(withRetry('addUsage', windows, attempts(cut()).attempt, () => 'done')).rejects.toMatchObject(
      {
        code: 'store_unavailable',
      },
    );
    const { attempt, calls } = attempts(refused());
    await expect(withRetry('migrate', windows, attempt, () => 'done')).rejects.toBeInstanceOf(StoreError);
    expect(calls()).toBe(1);
  });

  it('does not retry errors that are not retryable', async () => {
    const { attempt, calls } = attempts(storeError('op', 'store_schema_conflict'));
    await expect(withRetry('getResponse', windows, attempt, () => 'done')).rejects.toMatchObject({
      code: 'store_schema_conflict',
      status: 500,
    });
    expect(calls()).toBe(1);
  });
});
