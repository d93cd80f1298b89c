import type { EngineClock } from './engine-model.js';

interface Entry {
  due: number;
  seq: number;
  task: () => void;
}

/**
 * A clock whose time moves only when told: tasks run in the order of their due time, then of
 * their scheduling, so a simulation driven by it is the same on every run. It has the shape of
 * the mock's Clock that the engine model uses (`now`, `at`).
 */
export class VirtualClock implements EngineClock {
  private time: number;
  private seq = 0;
  private readonly heap: Entry[] = [];

  constructor(start = 0) {
    this.time = start;
  }

  now(): number {
    return this.time;
  }

  at(due: number, task: () => void): void {
    this.push({ due: Math.max(due, this.time), seq: this.seq++, task });
  }

  after(ms: number, task: () => void): void {
    this.at(this.time + ms, task);
  }

  /** Tasks scheduled and not yet run. */
  get pending(): number {
    return this.heap.length;
  }

  /** Runs every task due up to `time` (those they schedule too), then sets the time to `time`. */
  advanceTo(time: number): void {
    while (this.heap.length > 0 && this.heap[0]!.due <= time) {
      const entry = this.pop();
      this.time = entry.due;
      entry.task();
    }
    if (time > this.time) this.time = time;
  }

  advance(ms: number): void {
    this.advanceTo(this.time + ms);
  }

  /** Runs tasks until none is left (at most `limit`, against a simulation that never ends); returns the time. */
  runAll(limit = 1_000_000): number {
    for (let n = 0; this.heap.length > 0; n++) {
      if (n >= limit) throw new Error(`VirtualClock.runAll: more than ${limit} tasks`);
      const entry = this.pop();
      this.time = entry.due;
      entry.task();
    }
    return this.time;
  }

  private push(entry: Entry): void {
    const heap = this.heap;
    let i = heap.push(entry) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(entry, heap[parent]!)) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = entry;
  }

  private pop(): Entry {
    const heap = this.heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= heap.length) break;
        const r = l + 1;
        const child = r < heap.length && before(heap[r]!, heap[l]!) ? r : l;
        if (!before(heap[child]!, last)) break;
        heap[i] = heap[child]!;
        i = child;
      }
      heap[i] = last;
    }
    return top;
  }
}

function before(a: Entry, b: Entry): boolean {
  return a.due < b.due || (a.due === b.due && a.seq < b.seq);
}
