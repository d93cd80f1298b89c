import { getHeapStatistics } from 'node:v8';

/**
 * What a request may hold without the shared budget: an answer of ordinary size (a long chat
 * answer's Responses events are a few hundred KiB) never fails because others hold much.
 */
export const HOLD_FLOOR_BYTES = 1024 * 1024;

/** Holds take from the budget in steps this large, so that most events cost no call here. */
const STEP_BYTES = 64 * 1024;

/**
 * The default budget: a sixteenth of the V8 heap this process may grow to (`--max-old-space-size`,
 * or what Node picks from the machine's or container's memory). At its peak a byte held costs
 * about six in the heap (its events, their join and copy to storage, the garbage of the answer
 * being built: docs/SECURITY.md, "Memory"), so the answers being built take at most about 3/8 of
 * the heap, beside the floor each request in flight may hold.
 */
export function defaultHeldBudget(): number {
  return Math.floor(getHeapStatistics().heap_size_limit / 16);
}

/**
 * The bytes that the requests of this process hold of answers being built (a non-streaming
 * engine answer being read, a Responses run's events and response, the text a resumable stream
 * keeps for a continuation), under one budget: the gateway's memory for those has a ceiling
 * whatever the number of requests and whatever the engines send, `capacity` plus
 * `HOLD_FLOOR_BYTES` for each request in flight.
 *
 * Past its floor, a request whose next bytes do not fit is refused them and fails
 * (`gateway_memory_full`); the others go on. Written here because it is the gateway's own
 * accounting of its own buffers: no library keeps it.
 */
export class HeldBytes {
  private used = 0;
  private peakUsed = 0;

  constructor(
    /** The bytes all requests together may hold past their floors. */
    readonly capacity: number = defaultHeldBudget(),
  ) {}

  /** Bytes held now beyond the floors (for /metrics and tests). */
  get inUse(): number {
    return this.used;
  }

  /** The most ever held at once beyond the floors. */
  get peak(): number {
    return this.peakUsed;
  }

  /** A new request's account; `release()` it when the request ends. */
  hold(): Hold {
    return new Hold(this);
  }

  /** @internal Takes `bytes` from the budget; false (nothing taken) when they do not fit. */
  take(bytes: number): boolean {
    if (this.used + bytes > this.capacity) return false;
    this.used += bytes;
    if (this.used > this.peakUsed) this.peakUsed = this.used;
    return true;
  }

  /** @internal */
  give(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
  }
}

/** One request's account with the budget. */
export class Hold {
  /** What the request holds, as it said (`set`). */
  private size = 0;
  /** What it took from the budget (its size past the floor, rounded up to a step). */
  private taken = 0;
  private released = false;

  constructor(private readonly budget: HeldBytes) {}

  get bytes(): number {
    return this.size;
  }

  /**
   * Says the request now holds `bytes` in all. False when they do not fit (the request holds
   * past its floor and the budget is full): nothing is taken, and the caller fails the request.
   */
  set(bytes: number): boolean {
    if (this.released) return true;
    const needed = bytes <= HOLD_FLOOR_BYTES ? 0 : bytes - HOLD_FLOOR_BYTES;
    if (needed > this.taken) {
      const more = Math.ceil((needed - this.taken) / STEP_BYTES) * STEP_BYTES;
      if (!this.budget.take(more)) {
        // The last step may not fit whole where the exact bytes do.
        if (!this.budget.take(needed - this.taken)) return false;
        this.taken = needed;
      } else this.taken += more;
    }
    this.size = bytes;
    return true;
  }

  /** Adds `bytes` to what the request holds; false as `set`. */
  add(bytes: number): boolean {
    return this.set(this.size + bytes);
  }

  /** The request ended: what it took goes back to the budget (once). */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.budget.give(this.taken);
    this.taken = 0;
  }
}
