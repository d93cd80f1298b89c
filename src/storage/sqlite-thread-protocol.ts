import {
  ConversationGone,
  isStoreFailureCode,
  type StoreError,
  StoreFailure,
  StoreUnavailable,
} from '../errors/storage-errors.js';
import type { SqliteStoreOptions } from './sqlite-store.js';

/**
 * The messages between `SqliteStore` (on the gateway's event loop) and the storage thread
 * (`sqlite-thread.ts`) that runs better-sqlite3. A call names a method of `SqliteSyncStore`;
 * errors cross as plain data and are re-created as the same typed StoreError.
 */
export interface SqliteThreadInit {
  path: string;
  options: SqliteStoreOptions;
  /** Migrate on start: the thread replaces one that crashed after the store was migrated. */
  migrate: boolean;
}

export interface SqliteCall {
  id: number;
  method: string;
  args: unknown[];
  /** Unix ms, when the call was made. */
  sentAt: number;
  /**
   * The call's budget (the busy timeout), its wait in the thread's queue included, counted from
   * when it was made or the thread became ready, whichever is later: a call still queued at its
   * end fails instead of starting late, and one that starts before waits for a lock only until then.
   */
  budgetMs: number;
  /**
   * How many large strings of `args` were sent ahead in pieces (large-strings.ts): the thread
   * puts them back before it runs the call. Absent: none.
   */
  largeStrings?: number;
}

/** One piece of a large string of call `id`, sent before the call, in order. */
export interface SqlitePiece {
  piece: true;
  id: number;
  /** Which large string of the call. */
  index: number;
  text: string;
}

export type SqliteReply =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; error: WireStoreError };

export interface WireStoreError {
  message: string;
  code: string;
  cause?: { message: string; code?: string | undefined } | undefined;
  /** A ConversationGone's conversation, so the error is re-made as that class on this side. */
  conversationId?: string | undefined;
}

/** Ends the storage thread as a crash would (tests of the restart path). */
export const EXIT_THREAD_METHOD = '__sluice_exit_thread';

export function toWire(err: StoreError): WireStoreError {
  const cause = err.cause instanceof Error ? err.cause : undefined;
  return {
    message: err.message,
    code: err.code,
    cause: cause && { message: cause.message, code: (cause as { code?: string }).code },
    conversationId: err instanceof ConversationGone ? err.conversationId : undefined,
  };
}

export function fromWire(wire: WireStoreError): StoreError {
  if (wire.conversationId !== undefined) return new ConversationGone(wire.conversationId);
  const cause = wire.cause && Object.assign(new Error(wire.cause.message), { code: wire.cause.code });
  if (wire.code === 'store_unavailable') return new StoreUnavailable(wire.message, { cause });
  return new StoreFailure(wire.message, isStoreFailureCode(wire.code) ? wire.code : 'store_error', { cause });
}
