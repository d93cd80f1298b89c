/** Raised by `acquire` when its signal aborts while it waits, or when the pool closes. */
export class SlotWaitAborted extends Error {
  constructor(message = 'the request was aborted while it waited for a slot') {
    super(message);
  }
}

interface Waiter<T> {
  resolve(slot: T): void;
  reject(err: Error): void;
}

/** A fixed set of slots handed out first come, first served; the rest wait in FIFO order. */
export class SlotPool<T> {
  private readonly free: T[];
  private readonly waiters: Waiter<T>[] = [];
  private closed = false;

  constructor(slots: readonly T[]) {
    this.free = [...slots];
  }

  get waiting(): number {
    return this.waiters.length;
  }

  acquire(signal?: AbortSignal): Promise<T> {
    if (this.closed) return Promise.reject(new SlotWaitAborted('the worker is closing'));
    if (signal?.aborted) return Promise.reject(new SlotWaitAborted());
    const slot = this.free.shift();
    if (slot !== undefined) return Promise.resolve(slot);
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        const at = this.waiters.indexOf(waiter);
        if (at >= 0) this.waiters.splice(at, 1);
        reject(new SlotWaitAborted());
      };
      const waiter: Waiter<T> = {
        resolve: (s) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(s);
        },
        reject: (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  release(slot: T): void {
    const next = this.waiters.shift();
    if (next) next.resolve(slot);
    else this.free.push(slot);
  }

  /** Fails every waiter; slots still held are released as usual. */
  close(): void {
    this.closed = true;
    for (const waiter of this.waiters.splice(0)) waiter.reject(new SlotWaitAborted('the worker is closing'));
  }
}
