import { accessSync, constants } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import type { StoreError } from '../errors/storage-errors.js';
import { IdleCollection } from '../memory/idle-collection.js';
import { fromSqliteError, storeError } from './error-mapping.js';
import { joinLargeStrings } from './large-strings.js';
import { closeBehindKeeper } from './sqlite-close-unwritable.js';
import { SqliteSyncStore } from './sqlite-store.js';
import {
  EXIT_THREAD_METHOD,
  type SqliteCall,
  type SqlitePiece,
  type SqliteReply,
  type SqliteThreadInit,
  toWire,
} from './sqlite-thread-protocol.js';

/**
 * The storage thread: runs `SqliteSyncStore` (synchronous better-sqlite3) off the gateway's
 * event loop, one call at a time in arrival order. A lock held by another process, a slow or
 * failing disk, delays only this thread.
 */
const init = workerData as SqliteThreadInit;
const port = parentPort!;
const files =
  init.path === ':memory:' || init.path === '' ? [] : [init.path, `${init.path}-wal`, `${init.path}-shm`];

let store: SqliteSyncStore | undefined;
let openError: StoreError | undefined;
try {
  store = new SqliteSyncStore(init.path, init.options);
  if (init.migrate) await store.migrate();
} catch (err) {
  openError = fromSqliteError('open', err);
}

const readyAt = Date.now();

/** Pieces of the large strings of calls not arrived yet, by call id (large-strings.ts). */
const piecesOf = new Map<number, string[][]>();

// This thread's heap is its own: the tens of MiB of a long response's events it joins and writes
// stay in it as garbage after a burst, as in the gateway's (memory/idle-collection.ts). Between
// calls it holds nothing but the pieces of the calls still arriving.
new IdleCollection({
  quiet: () => piecesOf.size === 0,
  idle: () => piecesOf.size === 0,
  minExcessBytes: 32 * 1024 * 1024,
}).start();

port.on('message', (message: SqliteCall | SqlitePiece) => {
  if ('piece' in message) {
    const pieces = piecesOf.get(message.id) ?? [];
    piecesOf.set(message.id, pieces);
    const parts = pieces[message.index] ?? [];
    pieces[message.index] = parts;
    parts.push(message.text);
    return;
  }
  let call = message;
  if (call.largeStrings !== undefined) {
    call = { ...call, args: joinLargeStrings(call.args, piecesOf.get(call.id) ?? []) };
    piecesOf.delete(call.id);
  }
  void answer(call).then((reply) => {
    try {
      port.postMessage(reply);
    } catch (err) {
      // A result that cannot cross the thread (a bug in a store method): typed, never a crash.
      port.postMessage({
        id: call.id,
        ok: false,
        error: toWire(storeError(call.method, 'store_error', err)),
      });
    }
  });
});

async function answer(call: SqliteCall): Promise<SqliteReply> {
  if (call.method === EXIT_THREAD_METHOD) process.exit(70);
  try {
    if (openError) throw openError;
    // The thread's own start (a module load) is not the call's wait: its budget counts from then.
    const deadline = Math.max(call.sentAt, readyAt) + call.budgetMs;
    if (Date.now() > deadline) {
      throw storeError(call.method, 'store_unavailable', new Error('waited too long in the storage queue'));
    }
    if (call.method === 'close' && !writable()) return await closeUnwritable(call.id);
    assertWritable(call.method);
    if (store) SqliteSyncStore.waitForLocksUntil(store, deadline);
    const method = (store as unknown as Record<string, unknown>)[call.method];
    if (call.method === 'constructor' || typeof method !== 'function') {
      throw storeError(call.method, 'store_error', new Error(`no such store method: ${call.method}`));
    }
    const value: unknown = await method.apply(store, call.args);
    return { id: call.id, ok: true, value };
  } catch (err) {
    return { id: call.id, ok: false, error: toWire(fromSqliteError(call.method, err)) };
  }
}

/**
 * SQLite maps the WAL index (`-shm`) into memory and writes it on reads too. When that file
 * turns unwritable (chattr +i, a read-only filesystem) the write to the mapping is a SIGBUS,
 * which kills the whole process (a thread cannot contain a signal). So every call first checks
 * that the files are still writable, and fails typed (store_read_only) instead of touching them.
 */
function writable(): boolean {
  try {
    assertWritable('close');
    return true;
  } catch {
    return false;
  }
}

/** Closing checkpoints through -shm: only safe behind a keeper (see sqlite-close-unwritable.ts). */
async function closeUnwritable(id: number): Promise<SqliteReply> {
  const db = store!;
  if (await closeBehindKeeper(init.path, () => db.close())) return { id, ok: true, value: undefined };
  const error = storeError('close', 'store_read_only', new Error('left open: no keeper process could start'));
  return { id, ok: false, error: toWire(error) };
}

function assertWritable(operation: string): void {
  for (const file of files) {
    try {
      accessSync(file, constants.W_OK);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw storeError(operation, 'store_read_only', err);
    }
  }
}
