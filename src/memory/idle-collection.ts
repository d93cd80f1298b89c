import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Gives the heap back after a burst. V8 collects its old generation when allocation reaches a
 * limit it set from the heap's size at the last collection: after a burst of long answers (or a
 * flood an engine sent), a heap grown to hundreds of MiB keeps its garbage for as long as the
 * gateway stays quiet (a 1 GB heap kept 248 MiB of it for a minute with `/health` asked every
 * 50 ms, `npm run bench -- hostile`, issue 48), and the process's memory does not come back.
 *
 * So, every `everyMs`, the heap in use is compared with what the last full collection left: when
 * it has grown past twice that and by more than `minExcessBytes`, or when it grew so since and
 * V8's own collections have brought it back only part of the way (more than 5% above), while the
 * requests hold little (`quiet()`: what they hold is live, no collection gives it back), one full
 * collection is made, at most one every `minIntervalMs`. And once the gateway is idle (`idle()`:
 * nothing in flight, at two looks in a row), a heap more than 10% (and 4 MiB) above what the
 * last collection left is tidied the same way: what a burst left that V8 keeps for itself. It costs one pause of a few tens of ms (its length follows
 * the live heap, small when quiet), which V8 would have taken anyway at the next limit.
 *
 * Written here because Node offers no memory-pressure hint (V8's `MemoryPressureNotification`
 * and idle-time collection are not exposed): the collection is V8's own `gc()`, reached as Node's
 * `--expose-gc` would (the flag set at run time, `gc` taken from a new context).
 */
export interface IdleCollectionOptions {
  /** Whether the requests in flight hold little now (the held-bytes budget's use is low). */
  quiet(): boolean;
  /** Whether nothing is in flight now (default: never, so only the rules above apply). */
  idle?: () => boolean;
  everyMs?: number;
  minIntervalMs?: number;
  /** Growth past the last collection's heap below which nothing is done. */
  minExcessBytes?: number;
  /** The heap in use, in bytes. */
  usedHeap?: () => number;
  /** A full collection. */
  collect?: () => void;
  /** Milliseconds on the monotonic clock. */
  now?: () => number;
  /** Told of each collection: the heap in use before and after. */
  onCollected?: (before: number, after: number) => void;
}

/** V8's full collection, as `--expose-gc` gives it (see the comment above). */
export function fullCollection(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed;
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

const usedHeapSize = (): number => getHeapStatistics().used_heap_size;

/** Growth an idle gateway's heap is tidied past (besides 10%): less is not worth a pause. */
const TIDY_MIN_BYTES = 4 * 1024 * 1024;

export class IdleCollection {
  private readonly everyMs: number;
  private readonly minIntervalMs: number;
  private readonly minExcessBytes: number;
  private readonly usedHeap: () => number;
  private readonly collect: () => void;
  private readonly now: () => number;
  /** The heap in use after the last full collection (at first, when this started). */
  private baseline: number;
  /** The most in use seen since then: whether a burst came. */
  private peak: number;
  /** Whether the last look found the gateway idle. */
  private wasIdle = false;
  private lastAt = Number.NEGATIVE_INFINITY;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly options: IdleCollectionOptions) {
    this.everyMs = options.everyMs ?? 5_000;
    this.minIntervalMs = options.minIntervalMs ?? 30_000;
    this.minExcessBytes =
      options.minExcessBytes ?? Math.max(64 * 1024 * 1024, getHeapStatistics().heap_size_limit / 16);
    this.usedHeap = options.usedHeap ?? usedHeapSize;
    this.collect = options.collect ?? fullCollection();
    this.now = options.now ?? (() => performance.now());
    this.baseline = this.usedHeap();
    this.peak = this.baseline;
  }

  start(): void {
    this.timer ??= setInterval(() => this.check(), this.everyMs).unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One look at the heap (the timer's; public for tests): true when it collected. */
  check(): boolean {
    const used = this.usedHeap();
    // A collection V8 made by itself lowers the mark: growth is counted from the lowest seen.
    if (used < this.baseline) this.baseline = used;
    if (used > this.peak) this.peak = used;
    const grown = used >= 2 * this.baseline && used - this.baseline >= this.minExcessBytes;
    // A burst V8 has brought most of the way back by itself: what is left above is mostly garbage.
    const burst =
      this.peak - this.baseline >= this.minExcessBytes &&
      this.peak - used >= this.minExcessBytes / 2 &&
      used > this.baseline * 1.05;
    const idle = this.options.idle?.() ?? false;
    const tidy = idle && this.wasIdle && used > this.baseline * 1.1 && used - this.baseline >= TIDY_MIN_BYTES;
    this.wasIdle = idle;
    if (!grown && !burst && !tidy) return false;
    if (this.now() - this.lastAt < this.minIntervalMs || !this.options.quiet()) return false;
    this.collect();
    this.lastAt = this.now();
    const after = this.usedHeap();
    this.baseline = after;
    this.peak = after;
    this.options.onCollected?.(used, after);
    return true;
  }
}
