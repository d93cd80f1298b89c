/** A binary min-heap ordered by `less`. */
export class MinHeap<T> {
  /** Takes ownership of `items`, heapifying them in O(n). */
  constructor(
    private readonly less: (a: T, b: T) => boolean,
    private readonly items: T[] = [],
  ) {
    for (let i = (items.length >> 1) - 1; i >= 0; i--) this.siftDown(i, items[i]!);
  }

  push(item: T): void {
    const items = this.items;
    let i = items.push(item) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(item, items[parent]!)) break;
      items[i] = items[parent]!;
      i = parent;
    }
    items[i] = item;
  }

  get size(): number {
    return this.items.length;
  }

  /** The smallest item, left in place. */
  peek(): T | undefined {
    return this.items[0];
  }

  pop(): T | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last !== undefined) this.siftDown(0, last);
    return top;
  }

  /** Places `item` at `i` or below, moving smaller children up. */
  private siftDown(i: number, item: T): void {
    const items = this.items;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const child = right < items.length && this.less(items[right]!, items[left]!) ? right : left;
      if (!this.less(items[child]!, item)) break;
      items[i] = items[child]!;
      i = child;
    }
    items[i] = item;
  }
}
