import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';
import { StoreError } from '../errors/storage-errors.js';
import { nextTurn } from '../memory/turns.js';
import { fromSqliteError, storeError } from './error-mapping.js';
import { splitLargeStrings } from './large-strings.js';
import { type SqliteStoreOptions, SqliteSyncStore } from './sqlite-store.js';
import {
  EXIT_THREAD_METHOD,
  fromWire,
  type SqliteCall,
  type SqlitePiece,
  type SqliteReply,
  type SqliteThreadInit,
} from './sqlite-thread-protocol.js';

/** Every public method of `T`, answering through a promise (what crosses a thread is async). */
export type AsyncMethods<T> = {
  [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<Awaited<R>> : T[K];
};

/** The embedded store as the gateway sees it: every method of `SqliteSyncStore`, run on the storage thread. */
export type SqliteStore = AsyncMethods<SqliteSyncStore> & {
  /** Ends the storage thread as a crash would (tests of the restart path). */
  crashThreadForTest(): Promise<void>;
};

const DEFAULT_BUSY_TIMEOUT_MS = 5_000;
/** Slack past a call's deadline for its own work (not lock waits) before the thread counts as stuck. */
const WORK_GRACE_MS = 5_000;
/** A thread that crashes more often than this in a minute stays down: every call fails typed. */
const MAX_RESTARTS_PER_MINUTE = 5;
const WATCHDOG_INTERVAL_MS = 500;

interface Pending {
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

/**
 * The gateway side of the storage thread: posts `{id, method, args}` and awaits the reply, so
 * better-sqlite3 never blocks the event loop. Methods are not listed here: every method of
 * `SqliteSyncStore` is forwarded (installed below from its prototype). One thread per store
 * (`:memory:` works: its database lives in that thread). A thread that dies rejects its
 * pending calls with store_unavailable and is restarted (bounded); one that stops answering
 * (stuck in a syscall) is abandoned and replaced the same way.
 */
class SqliteThreadStore {
  readonly kind = 'sqlite' as const;
  private thread: Worker | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private migrated = false;
  private closed = false;
  private readonly restarts: number[] = [];
  private lastProgress = Date.now();
  private readonly busyTimeoutMs: number;
  private readonly watchdog: NodeJS.Timeout;

  constructor(
    private readonly path: string,
    private readonly options: SqliteStoreOptions = {},
  ) {
    this.busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    try {
      if (path !== ':memory:' && path !== '') mkdirSync(dirname(path), { recursive: true });
    } catch (err) {
      throw fromSqliteError('open', err);
    }
    this.thread = this.spawn();
    this.watchdog = setInterval(() => this.checkStuck(), WATCHDOG_INTERVAL_MS).unref();
  }

  async migrate(): Promise<void> {
    await this.call('migrate', []);
    this.migrated = true;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    let failure: unknown;
    try {
      if (this.thread) await this.call('close', []);
    } catch (err) {
      failure = err;
    }
    this.closed = true;
    clearInterval(this.watchdog);
    const thread = this.thread;
    this.thread = undefined;
    if (failure instanceof StoreError && failure.code === 'store_read_only') {
      // The database is still open, and closing it (which ending the thread does) checkpoints
      // through the mapped -shm: a SIGBUS. Leave the thread be; it ends with the process.
      thread?.unref();
      return;
    }
    await thread?.terminate();
    if (failure) throw failure;
  }

  async crashThreadForTest(): Promise<void> {
    await this.call(EXIT_THREAD_METHOD, []).catch(() => undefined);
  }

  call(method: string, args: unknown[]): Promise<unknown> {
    const thread = this.thread;
    if (this.closed || !thread) {
      const why = this.closed ? 'the store is closed' : 'the storage thread crashed repeatedly';
      return Promise.reject(storeError(method, 'store_unavailable', new Error(why)));
    }
    const id = this.nextId++;
    if (this.pending.size === 0) {
      this.lastProgress = Date.now();
      thread.ref();
    }
    // One budget per call, its wait in the thread's queue included: a call behind others that
    // each wait out a lock starts with what is left of its busy timeout, or is refused.
    const call: SqliteCall = { id, method, args, sentAt: Date.now(), budgetMs: this.busyTimeoutMs };
    const large = splitLargeStrings(args);
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      const fail = (err: unknown) => {
        // Arguments that cannot cross a thread (functions, ...): a bug in the caller, typed.
        if (!this.pending.delete(id)) return;
        reject(storeError(method, 'store_error', err));
      };
      if (!large) {
        try {
          thread.postMessage(call);
        } catch (err) {
          fail(err);
        }
        return;
      }
      void this.sendInPieces(
        thread,
        { ...call, args: large.args, largeStrings: large.pieces.length },
        large.pieces,
      ).catch(fail);
    });
  }

  /** Sends a call's large strings a piece a turn of the event loop, then the call. */
  private async sendInPieces(thread: Worker, call: SqliteCall, pieces: readonly string[][]): Promise<void> {
    for (const [index, parts] of pieces.entries()) {
      for (const text of parts) {
        // The thread was replaced meanwhile: the call was failed with it.
        if (thread !== this.thread) return;
        thread.postMessage({ piece: true, id: call.id, index, text } satisfies SqlitePiece);
        await nextTurn();
      }
    }
    if (thread === this.thread) thread.postMessage(call);
  }

  private spawn(): Worker {
    const init: SqliteThreadInit = { path: this.path, options: this.options, migrate: this.migrated };
    const thread = startThread(init);
    let crash: unknown;
    thread.on('message', (reply: SqliteReply) => {
      if (thread === this.thread) this.settle(reply);
    });
    thread.on('error', (err) => {
      crash = err;
    });
    thread.on('exit', (code) => {
      if (thread !== this.thread) return;
      this.replace(crash ?? new Error(`the storage thread exited with code ${code}`));
    });
    thread.unref();
    return thread;
  }

  private settle(reply: SqliteReply): void {
    const pending = this.pending.get(reply.id);
    if (!pending) return;
    this.pending.delete(reply.id);
    this.lastProgress = Date.now();
    if (this.pending.size === 0) this.thread?.unref();
    if (reply.ok) pending.resolve(reply.value);
    else pending.reject(fromWire(reply.error));
  }

  /** The thread is gone or stuck: fail what it had, and start another unless it keeps dying. */
  private replace(cause: unknown): void {
    const old = this.thread;
    this.thread = undefined;
    void old?.terminate();
    const failed = [...this.pending.values()];
    this.pending.clear();
    for (const call of failed) call.reject(storeError('call', 'store_unavailable', cause));
    if (this.closed) return;
    const now = Date.now();
    while (this.restarts.length > 0 && this.restarts[0]! < now - 60_000) this.restarts.shift();
    if (this.restarts.length >= MAX_RESTARTS_PER_MINUTE) return;
    this.restarts.push(now);
    this.thread = this.spawn();
  }

  /** A thread that answered nothing for longer than any call may take is stuck (a hung disk). */
  private checkStuck(): void {
    if (this.pending.size === 0 || !this.thread) return;
    const limit = 2 * (this.busyTimeoutMs + WORK_GRACE_MS);
    if (Date.now() - this.lastProgress > limit) {
      this.replace(new Error(`the storage thread answered nothing for ${limit} ms`));
    }
  }
}

// Every method of the synchronous store, forwarded to the thread: a method added there works
// here with no code of its own.
for (const name of Object.getOwnPropertyNames(SqliteSyncStore.prototype)) {
  if (name === 'constructor' || Object.hasOwn(SqliteThreadStore.prototype, name)) continue;
  Object.defineProperty(SqliteThreadStore.prototype, name, {
    value(this: SqliteThreadStore, ...args: unknown[]) {
      return this.call(name, args);
    },
    writable: true,
    configurable: true,
  });
}

export const SqliteStore = SqliteThreadStore as unknown as new (
  path: string,
  options?: SqliteStoreOptions,
) => SqliteStore;

/** The thread runs the built file, or under tsx the TypeScript source (tests, `tsx src/cli/main.ts`). */
function startThread(init: SqliteThreadInit): Worker {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return new Worker(new URL('./sqlite-thread.js', here), { workerData: init });
  const entry = new URL('./sqlite-thread.ts', here).href;
  const boot = `import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(entry)}); });`;
  return new Worker(boot, { eval: true, workerData: init });
}
