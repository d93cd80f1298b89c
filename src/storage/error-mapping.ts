import { StoreError, type StoreErrorCode, StoreFailure, StoreUnavailable } from '../errors/storage-errors.js';

export type { StoreErrorCode } from '../errors/storage-errors.js';

/**
 * Turns driver errors into StoreErrors with stable codes. The message names the operation only:
 * a StoreError's message reaches API clients, and driver messages can quote SQL or values. The
 * driver error stays available as `cause` for the logs.
 */

const MESSAGES: Record<StoreErrorCode, string> = {
  store_duplicate: 'an object with this id already exists',
  store_unavailable: 'the storage backend is unavailable',
  store_read_only: 'the database files are not writable',
  store_full: 'the disk holding the database is full',
  store_io_error: 'the disk holding the database failed (I/O error)',
  store_schema_conflict: "the database holds tables that conflict with sluice's schema",
  store_error: 'the storage backend failed',
};

/** Only `store_unavailable` is worth retrying: the backend may come back (a lock released, a restart). */
export function storeError(operation: string, code: StoreErrorCode, cause?: unknown): StoreError {
  const message = `Storage ${operation}: ${MESSAGES[code]}.`;
  return code === 'store_unavailable'
    ? new StoreUnavailable(message, { cause })
    : new StoreFailure(message, code, { cause });
}

export function fromSqliteError(operation: string, err: unknown): StoreError {
  if (err instanceof StoreError) return err;
  return storeError(operation, classifySqliteError(err), err);
}

export function fromPostgresError(operation: string, err: unknown): StoreError {
  if (err instanceof StoreError) return err;
  return storeError(operation, classifyPostgresError(err), err);
}

function classifySqliteError(err: unknown): StoreErrorCode {
  const code = errorCode(err) ?? '';
  if (code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || code === 'SQLITE_CONSTRAINT_UNIQUE')
    return 'store_duplicate';
  // Another process held the write lock for longer than busy_timeout: worth retrying.
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return 'store_unavailable';
  if (code.startsWith('SQLITE_READONLY') || code === 'SQLITE_CANTOPEN' || code === 'SQLITE_PERM')
    return 'store_read_only';
  if (READ_ONLY_ERRNO.has(code)) return 'store_read_only';
  if (code === 'SQLITE_FULL' || code === 'ENOSPC') return 'store_full';
  if (code.startsWith('SQLITE_IOERR') || code === 'EIO') return 'store_io_error';
  return 'store_error';
}

/** What a write to a file that became read-only (chattr +i, a read-only remount) fails with. */
const READ_ONLY_ERRNO = new Set(['EROFS', 'EPERM', 'EACCES']);

const PG_UNIQUE_VIOLATION = '23505';
/** duplicate_table, duplicate_column, undefined_column, datatype_mismatch: tables not made by sluice. */
const PG_SCHEMA_CONFLICTS = new Set(['42P07', '42701', '42703', '42804']);
/** admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections. */
const PG_UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300']);
const PG_CONNECTION_EXCEPTION_CLASS = '08';
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
/** pg and pg-pool report lost or timed-out connections with plain Errors that have no code. */
const CONNECTION_MESSAGES =
  /Connection terminated|timeout exceeded when trying to connect|not queryable|Connection closed|Query read timeout/i;

function classifyPostgresError(err: unknown): StoreErrorCode {
  const code = errorCode(err);
  if (code === PG_UNIQUE_VIOLATION) return 'store_duplicate';
  if (code !== undefined && PG_SCHEMA_CONFLICTS.has(code)) return 'store_schema_conflict';
  if (code !== undefined && isUnavailableCode(code)) return 'store_unavailable';
  if (
    err instanceof AggregateError &&
    err.errors.some((inner) => isUnavailableCode(errorCode(inner) ?? ''))
  ) {
    return 'store_unavailable';
  }
  if (err instanceof Error && code === undefined && CONNECTION_MESSAGES.test(err.message)) {
    return 'store_unavailable';
  }
  return 'store_error';
}

function isUnavailableCode(code: string): boolean {
  return (
    NETWORK_CODES.has(code) ||
    PG_UNAVAILABLE_STATES.has(code) ||
    (code.length === 5 && code.startsWith(PG_CONNECTION_EXCEPTION_CLASS))
  );
}

function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null || !('code' in err)) return undefined;
  return typeof err.code === 'string' ? err.code : undefined;
}
