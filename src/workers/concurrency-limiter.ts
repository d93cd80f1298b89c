import { QueueFull, QueueTimeout } from '../errors/http-errors.js';

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/**
 * At most `maxConcurrent` requests at once on a worker; up to `queueSize` more wait in FIFO
 * order for at most `queueTimeoutMs`. A full queue or a timeout is a 503 with Retry-After.
 */
export class ConcurrencyLimiter {
  private active = 0;
  private readonly queue: Waiter[] = [];

  constructor(
    private readonly workerId: string,
    readonly maxConcurrent: number,
    readonly queueSize: number,
    readonly queueTimeoutMs: number,
  ) {}

  get inFlight(): number {
    return this.active;
  }
  get queued(): number {
    return this.queue.length;
  }
  get hasFreeSlot(): boolean {
    return this.active < this.maxConcurrent;
  }
  get canQueue(): boolean {
    return this.hasFreeSlot || this.queue.length < this.queueSize;
  }

  /** Takes a free slot at once if there is one (no promise, no wait); call `release()` afterwards. */
  tryAcquire(): boolean {
    if (this.active >= this.maxConcurrent) return false;
    this.active++;
    return true;
  }

  /** Resolves once a slot is held; call `release()` exactly once afterwards. */
  acquire(signal?: AbortSignal): Promise<void> {
    if (this.tryAcquire()) return Promise.resolve();
    if (this.queue.length >= this.queueSize) {
      return Promise.reject(new QueueFull(this.workerId, Math.max(1, Math.ceil(this.queueTimeoutMs / 1000))));
    }
    return new Promise<void>((resolve, reject) => {
      const started = performance.now();
      const waiter: Waiter = {
        resolve,
        reject,
        signal,
        onAbort: undefined,
        timer: setTimeout(() => {
          this.drop(waiter);
          reject(new QueueTimeout(performance.now() - started));
        }, this.queueTimeoutMs),
      };
      if (signal) {
        waiter.onAbort = () => {
          this.drop(waiter);
          reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.queue.push(waiter);
    });
  }

  release(): void {
    const next = this.queue.shift();
    if (next) {
      this.cleanup(next);
      next.resolve(); // the slot passes straight to the next waiter
      return;
    }
    this.active--;
  }

  /** Fails every waiter (worker removed or gateway shutting down). */
  rejectAll(err: Error): void {
    for (const waiter of this.queue.splice(0)) {
      this.cleanup(waiter);
      waiter.reject(err);
    }
  }

  private drop(waiter: Waiter): void {
    const index = this.queue.indexOf(waiter);
    if (index >= 0) this.queue.splice(index, 1);
    this.cleanup(waiter);
  }

  private cleanup(waiter: Waiter): void {
    clearTimeout(waiter.timer);
    if (waiter.signal && waiter.onAbort) waiter.signal.removeEventListener('abort', waiter.onAbort);
  }
}
