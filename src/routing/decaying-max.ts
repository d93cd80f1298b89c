/**
 * The largest value seen lately: what was seen in the current window and the one before it, so a
 * value stops counting between one and two windows after it was last seen. The scorer's learnt
 * batch sizes and most-ever-running counts are kept so: an engine restarted smaller under the
 * same id (a new model revision, fewer GPUs) does not keep its old room for ever (issue 49).
 */
export class DecayingMax {
  private current = 0;
  private previous = 0;
  private windowStart: number | undefined;

  constructor(private readonly windowMs: number) {}

  /** Notes `value`, seen at `now` (the monotonic clock, ms). */
  note(value: number, now: number): void {
    this.roll(now);
    if (value > this.current) this.current = value;
  }

  /** The largest value seen in this window and the one before, or undefined when none was. */
  get(now: number): number | undefined {
    this.roll(now);
    const max = Math.max(this.current, this.previous);
    return max > 0 ? max : undefined;
  }

  private roll(now: number): void {
    if (this.windowStart === undefined) {
      this.windowStart = now;
      return;
    }
    const windows = Math.floor((now - this.windowStart) / this.windowMs);
    if (windows <= 0) return;
    this.previous = windows === 1 ? this.current : 0;
    this.current = 0;
    this.windowStart += windows * this.windowMs;
  }
}
