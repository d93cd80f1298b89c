/** A fixed-size ring, oldest first; pushing into a full ring drops the oldest entry. */
export class Ring<T> {
  private readonly items: (T | undefined)[];
  private start = 0;
  private count = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('ring capacity must be >= 1');
    this.items = new Array<T | undefined>(capacity);
  }

  get size(): number {
    return this.count;
  }

  push(item: T): void {
    this.items[(this.start + this.count) % this.capacity] = item;
    if (this.count < this.capacity) this.count++;
    else this.start = (this.start + 1) % this.capacity;
  }

  /** The i-th entry, oldest first. */
  at(i: number): T | undefined {
    if (i < 0 || i >= this.count) return undefined;
    return this.items[(this.start + i) % this.capacity];
  }

  last(): T | undefined {
    return this.at(this.count - 1);
  }

  /** Drops entries from the oldest end while `stale` holds. */
  dropWhile(stale: (item: T) => boolean): void {
    while (this.count > 0 && stale(this.items[this.start]!)) {
      this.items[this.start] = undefined;
      this.start = (this.start + 1) % this.capacity;
      this.count--;
    }
  }

  clear(): void {
    this.dropWhile(() => true);
  }

  toArray(): T[] {
    const out: T[] = [];
    for (let i = 0; i < this.count; i++) out.push(this.at(i)!);
    return out;
  }
}
