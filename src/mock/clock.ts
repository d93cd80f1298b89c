import { performance } from 'node:perf_hooks';
import { MinHeap } from '../routing/min-heap.js';

export type Task = () => void;

interface Entry {
  due: number;
  seq: number;
  task: Task;
}

/** Entries due within this many ms of now run in the current tick (timers have 1 ms granularity). */
const SLACK_MS = 1;

/**
 * One shared clock per mock worker: every stream's next token, and every delay, waits in one
 * queue served by a single timer, and "as fast as possible" streams share one setImmediate
 * round per turn of the event loop. So 1000 streams cost one timer wake-up per millisecond at
 * most, not 1000 timers. Token ticks come in non-decreasing order (same interval for every
 * stream), so they go to a FIFO (parallel arrays, no allocation); anything earlier than its tail
 * (delays, a late stream skipping ahead) goes to a min-heap. Cancelled work is not removed: a
 * task checks whether its request is still alive when it runs.
 */
export class Clock {
  private fifoDue: number[] = [];
  private fifoTask: (Task | undefined)[] = [];
  private fifoHead = 0;
  private heap = new MinHeap<Entry>(before);
  private seq = 0;
  private timer: NodeJS.Timeout | undefined;
  private armedFor = Number.POSITIVE_INFINITY;
  private ticking = false;
  private ready: Task[] = [];
  private immediate: NodeJS.Immediate | undefined;
  private closed = false;

  now(): number {
    return performance.now();
  }

  /** Runs `task` at time `due` (a `now()` value). */
  at(due: number, task: Task): void {
    if (this.closed) return;
    const length = this.fifoDue.length;
    if (length === this.fifoHead || due >= this.fifoDue[length - 1]!) {
      this.fifoDue.push(due);
      this.fifoTask.push(task);
    } else {
      this.heap.push({ due, seq: this.seq++, task });
    }
    if (!this.ticking && due < this.armedFor) this.arm(due);
  }

  after(ms: number, task: Task): void {
    this.at(this.now() + ms, task);
  }

  /** Runs `task` in the next setImmediate round shared by every caller. */
  soon(task: Task): void {
    if (this.closed) return;
    this.ready.push(task);
    this.immediate ??= setImmediate(this.round);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.heap = new MinHeap<Entry>(before);
    this.fifoDue = [];
    this.fifoTask = [];
    this.fifoHead = 0;
    this.ready = [];
  }

  private readonly round = (): void => {
    this.immediate = undefined;
    const tasks = this.ready;
    this.ready = [];
    for (const task of tasks) run(task);
  };

  private arm(due: number): void {
    clearTimeout(this.timer);
    this.armedFor = due;
    this.timer = setTimeout(this.tick, Math.max(0, due - this.now()));
    this.timer.unref();
  }

  private readonly tick = (): void => {
    this.timer = undefined;
    this.armedFor = Number.POSITIVE_INFINITY;
    this.ticking = true;
    try {
      const limit = this.now() + SLACK_MS;
      // Tasks scheduled during this tick for now or earlier still run in it.
      for (;;) {
        const head = this.fifoHead;
        const fifo = head < this.fifoDue.length ? this.fifoDue[head]! : Number.POSITIVE_INFINITY;
        const heap = this.heap.peek()?.due ?? Number.POSITIVE_INFINITY;
        if (fifo <= heap) {
          if (fifo > limit) break;
          const task = this.fifoTask[head]!;
          this.fifoTask[head] = undefined;
          this.fifoHead = head + 1;
          run(task);
        } else {
          if (heap > limit) break;
          run(this.heap.pop()!.task);
        }
      }
    } finally {
      this.ticking = false;
      this.compact();
      const next = Math.min(
        this.fifoDue[this.fifoHead] ?? Number.POSITIVE_INFINITY,
        this.heap.peek()?.due ?? Number.POSITIVE_INFINITY,
      );
      if (next !== Number.POSITIVE_INFINITY && !this.closed) this.arm(next);
    }
  };

  /** Drops the FIFO's consumed head once it is most of the arrays. */
  private compact(): void {
    const head = this.fifoHead;
    if (head === this.fifoDue.length) {
      this.fifoDue.length = 0;
      this.fifoTask.length = 0;
      this.fifoHead = 0;
    } else if (head >= 1024 && head * 2 >= this.fifoDue.length) {
      this.fifoDue = this.fifoDue.slice(head);
      this.fifoTask = this.fifoTask.slice(head);
      this.fifoHead = 0;
    }
  }
}

function before(a: Entry, b: Entry): boolean {
  return a.due < b.due || (a.due === b.due && a.seq < b.seq);
}

/** A failing task must not stop the clock: its error is rethrown outside the loop. */
function run(task: Task): void {
  try {
    task();
  } catch (err) {
    queueMicrotask(() => {
      throw err;
    });
  }
}
