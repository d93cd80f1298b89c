import { SluiceError } from './base.js';
import { InvalidRequest } from './request-errors.js';

/**
 * A storage backend failed (connection lost, constraint broken, disk full): an unavailable or
 * busy one (`store_unavailable`, worth retrying) is a 503, anything else a 500. Messages name the
 * operation only, never what the driver said (that stays the `cause`, for the logs).
 */

/** The codes of a store failure that is not worth retrying. */
export type StoreFailureCode =
  | 'store_duplicate'
  | 'store_read_only'
  | 'store_full'
  | 'store_io_error'
  | 'store_schema_conflict'
  | 'store_error';

/** The codes a storage backend's failure is classified into (`storeError` in src/storage/). */
export type StoreErrorCode = 'store_unavailable' | StoreFailureCode;

const FAILURE_CODES: ReadonlySet<string> = new Set<StoreFailureCode>([
  'store_duplicate',
  'store_read_only',
  'store_full',
  'store_io_error',
  'store_schema_conflict',
  'store_error',
]);

export function isStoreFailureCode(code: string): code is StoreFailureCode {
  return FAILURE_CODES.has(code);
}

/** The base of every storage failure. */
export abstract class StoreError extends SluiceError {
  abstract override readonly code: StoreErrorCode | 'store_conversation_gone';
}

/** The storage backend is unavailable or busy for now (unreachable, locked past its timeout). */
export class StoreUnavailable extends StoreError {
  readonly code = 'store_unavailable';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1' };
  }
}

/** The storage backend failed in a way another try will not mend (`code` says how). */
export class StoreFailure extends StoreError {
  readonly retryable = false;
  override readonly status = 500;
  override readonly type = 'server_error' as const;
  constructor(
    message: string,
    readonly code: StoreFailureCode,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** A response's conversation was deleted before the response could be appended to it. */
export class ConversationGone extends StoreError {
  readonly code = 'store_conversation_gone';
  readonly retryable = false;
  override readonly status = 500;
  override readonly type = 'server_error' as const;
  constructor(readonly conversationId: string) {
    super(`The conversation '${conversationId}' no longer exists.`);
  }
}

/** A request for what needs storage (conversations, API keys) on a gateway with `storage.kind: none`. */
export class StorageDisabled extends InvalidRequest {
  readonly code = 'storage_disabled';
  constructor(message: string) {
    super(message);
  }
}
