import type { StoreError } from '../errors/storage-errors.js';

/**
 * How a PostgreSQL operation is retried while the server is unreachable (a restart, a failover,
 * a network cut). Each retry waits with exponential backoff, all within a bounded window; past
 * it the store_unavailable error reaches the caller (a 503, or a store_write_failed terminal).
 *
 * - `read`: retried (short window: a client waiting on a read gets its 503 quickly).
 * - `idempotent`: a write that may run twice (set a status, delete by id).
 * - `insert`: a write that fails with store_duplicate the second time: after an attempt whose
 *   outcome is unknown (the connection broke after the query was sent), a duplicate means the
 *   earlier attempt committed, and counts as success.
 * - `unsent`: retried only when the query never reached the server (the connection could not
 *   be made), e.g. an increment that must not be applied twice.
 * - `none`: not retried (migrations at start: one clear failure).
 */
export type RetryPolicy = 'read' | 'idempotent' | 'insert' | 'unsent' | 'none';

const POLICIES: Record<string, RetryPolicy> = {
  migrate: 'none',
  insertResponse: 'insert',
  insertConversation: 'insert',
  insertKey: 'insert',
  appendConversationItems: 'insert',
  updateResponse: 'idempotent',
  requestCancel: 'idempotent',
  updateConversationMetadata: 'idempotent',
  deleteResponse: 'idempotent',
  deleteConversation: 'idempotent',
  deleteConversationItem: 'idempotent',
  deleteKey: 'idempotent',
  addUsage: 'unsent',
};

/** The policy of an operation: listed above, else a read by its name, else the safe `unsent`. */
export function retryPolicy(operation: string): RetryPolicy {
  return POLICIES[operation] ?? (/^(get|list|all)/.test(operation) ? 'read' : 'unsent');
}

export interface RetryWindows {
  readMs: number;
  writeMs: number;
  /** Told of each retry (an attempt failed and another follows), e.g. to count it. */
  onRetry?: ((operation: string) => void) | undefined;
  /** The clock of the windows and the waits (default: the monotonic clock and a timer); tests give their own. */
  clock?: RetryClock | undefined;
}

export interface RetryClock {
  /** Milliseconds on a clock that never steps back (performance.now). */
  now(): number;
  sleep(ms: number): Promise<void>;
}

const REAL_CLOCK: RetryClock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

const FIRST_DELAY_MS = 50;
const MAX_DELAY_MS = 1_000;

/** Connection errors raised before a query could be sent (pg's connect path). */
const NEVER_SENT =
  /ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|timeout exceeded when trying to connect/;

/**
 * Runs `attempt` (which throws mapped StoreErrors) under `operation`'s policy. `alreadyDone`
 * is the result to return when an `insert` finds its own earlier, unacknowledged write.
 * `attempt` is given the window's end (on the clock's `now`, performance.now by default): an
 * attempt must not outlast it, or a server that stopped answering without closing anything
 * (packets dropped) would hold the caller for the whole query timeout instead of the window.
 */
export async function withRetry<T>(
  operation: string,
  windows: RetryWindows,
  attempt: (until: number) => Promise<T>,
  alreadyDone: () => T,
): Promise<T> {
  const clock = windows.clock ?? REAL_CLOCK;
  const policy = retryPolicy(operation);
  const until = clock.now() + (policy === 'read' ? windows.readMs : windows.writeMs);
  let delay = FIRST_DELAY_MS;
  let unacknowledged = false;
  for (;;) {
    try {
      return await attempt(until);
    } catch (err) {
      const error = err as StoreError;
      if (error.code === 'store_duplicate' && unacknowledged && policy === 'insert') return alreadyDone();
      const sent = !neverSent(error);
      if (
        policy === 'none' ||
        !error.retryable ||
        (policy === 'unsent' && sent) ||
        clock.now() + delay > until
      )
        throw error;
      if (sent) unacknowledged = true;
      windows.onRetry?.(operation);
      await clock.sleep(delay);
      delay = Math.min(delay * 2, MAX_DELAY_MS);
    }
  }
}

function neverSent(error: StoreError): boolean {
  const cause = error.cause as { code?: unknown; message?: unknown; errors?: unknown[] } | undefined;
  if (!cause) return false;
  const text = `${String(cause.code ?? '')} ${String(cause.message ?? '')}`;
  if (NEVER_SENT.test(text)) return true;
  return (
    Array.isArray(cause.errors) &&
    cause.errors.some((inner) => NEVER_SENT.test(String((inner as Error)?.message)))
  );
}
