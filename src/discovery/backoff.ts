/** Exponential backoff: `initialMs`, doubling on each call to `next`, capped at `maxMs`. */
export class Backoff {
  private current: number;

  constructor(
    private readonly initialMs: number,
    private readonly maxMs: number,
  ) {
    this.current = initialMs;
  }

  next(): number {
    const delay = Math.min(this.current, this.maxMs);
    this.current = Math.min(this.current * 2, this.maxMs);
    return delay;
  }

  reset(): void {
    this.current = this.initialMs;
  }
}

/** Waits `ms`, or less when `signal` aborts; never rejects, and leaves no timer behind. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted || ms <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
