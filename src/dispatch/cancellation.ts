type Listener = (this: unknown, event: { type: 'abort' }) => void;

const ABORT_EVENT = Object.freeze({ type: 'abort' as const });

/**
 * A cheap stand-in for an AbortController on the request hot path. Node's AbortController and
 * AbortSignal are EventTargets: creating one, and adding and removing each listener, costs
 * several microseconds, and a request made two of them (its client's and its upstream
 * attempt's). This one keeps its listeners in an array. Its `signal` has what the gateway and
 * undici use of an AbortSignal: `aborted`, `reason`, and `addEventListener` /
 * `removeEventListener` of `abort` (a listener added after the abort is never called, a listener
 * added twice is called once, as with an EventTarget).
 */
export class Cancellation {
  aborted = false;
  reason: unknown = undefined;
  private listeners: Listener[] | undefined;

  /** The signal to hand to what takes an AbortSignal (undici, the dispatcher). */
  get signal(): AbortSignal {
    return this as unknown as AbortSignal;
  }

  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason ?? new DOMException('This operation was aborted', 'AbortError');
    const listeners = this.listeners;
    this.listeners = undefined;
    if (!listeners) return;
    for (const listener of listeners) {
      try {
        listener.call(this, ABORT_EVENT);
      } catch (err) {
        // As an EventTarget does: a listener's exception does not stop the others.
        process.nextTick(() => {
          throw err;
        });
      }
    }
  }

  addEventListener(type: string, listener: Listener, _options?: unknown): void {
    if (type !== 'abort' || this.aborted) return;
    if (!this.listeners) this.listeners = [listener];
    else if (!this.listeners.includes(listener)) this.listeners.push(listener);
  }

  removeEventListener(type: string, listener: Listener): void {
    if (type !== 'abort' || !this.listeners) return;
    const at = this.listeners.indexOf(listener);
    if (at !== -1) this.listeners.splice(at, 1);
  }
}
