import { MinHeap } from '../routing/min-heap.js';
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
  private readonly heap = new MinHeap<Entry>(before);

  constructor(start = 0) {
    this.time = start;
  }

  now(): number {
    return this.time;
  }

  at(due: number, task: () => void): void {
    this.heap.push({ due: Math.max(due, this.time), seq: this.seq++, task });
  }

  after(ms: number, task: () => void): void {
    this.at(this.time + ms, task);
  }

  /** Tasks scheduled and not yet run. */
  get pending(): number {
    return this.heap.size;
  }

  /** Runs every task due up to `time` (those they schedule too), then sets the time to `time`. */
  advanceTo(time: number): void {
    while ((this.heap.peek()?.due ?? Number.POSITIVE_INFINITY) <= time) {
      const entry = this.heap.pop()!;
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
    for (let n = 0; this.heap.size > 0; n++) {
      if (n >= limit) throw new Error(`VirtualClock.runAll: more than ${limit} tasks`);
      const entry = this.heap.pop()!;
      this.time = entry.due;
      entry.task();
    }
    return this.time;
  }
}

function before(a: Entry, b: Entry): boolean {
  return a.due < b.due || (a.due === b.due && a.seq < b.seq);
}
