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
    const elapsed: Record<string, number> = {};
    for (const [operation, windowMs] of [
      ['getResponse', windows.readMs],
      ['updateResponse', windows.writeMs],
    ] as const) {
      const started = Date.now();
      let calls = 0;
      const failing = async () => {
        calls++;
        throw refused();
      };
      await expect(withRetry(operation, windows, failing, () => 'done')).rejects.toMatchObject({
        code: 'store_unavailable',
        retryable: true,
      });
      elapsed[operation] = Date.now() - started;
      // It retried (backing off), for about its window: not past the window by more than one backoff.
      expect(calls).toBeGreaterThan(2);
      expect(elapsed[operation]).toBeGreaterThanOrEqual(windowMs / 2);
      expect(elapsed[operation]).toBeLessThan(windowMs * 3);
    }
    // The read's window is the shorter one (a waiting client gets its 503 sooner).
    expect(elapsed.getResponse).toBeLessThan(elapsed.updateResponse!);
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
