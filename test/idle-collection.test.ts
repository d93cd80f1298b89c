import { describe, expect, it } from 'vitest';
import { fullCollection, IdleCollection } from '../src/memory/idle-collection.js';

const MiB = 1024 * 1024;

/** A heap whose use the test sets, and a collection that brings it to `live`. */
function fakeHeap(start: number) {
  const heap = { used: start, live: start, collections: 0, quiet: true, at: 0 };
  const collection = new IdleCollection({
    quiet: () => heap.quiet,
    minIntervalMs: 30_000,
    minExcessBytes: 64 * MiB,
    usedHeap: () => heap.used,
    collect: () => {
      heap.collections++;
      heap.used = heap.live;
    },
    now: () => heap.at,
  });
  return { heap, collection };
}

describe('idle collection (issue 48: memory comes back after a burst)', () => {
  it('collects once a burst left garbage and the requests hold little, not while they hold much', () => {
    const { heap, collection } = fakeHeap(60 * MiB);
    heap.used = 300 * MiB; // a burst: mostly garbage, the requests still holding their answers
    heap.quiet = false;
    expect(collection.check()).toBe(false);
    expect(heap.collections).toBe(0);
    heap.quiet = true; // the burst is over
    expect(collection.check()).toBe(true);
    expect(heap.used).toBe(60 * MiB);
    expect(collection.check()).toBe(false);
    expect(heap.collections).toBe(1);
  });

  it('leaves small growth alone, and growth that is not twice the last live heap', () => {
    const { heap, collection } = fakeHeap(60 * MiB);
    heap.used = 110 * MiB; // past twice, but by less than minExcessBytes
    expect(collection.check()).toBe(false);
    const big = fakeHeap(200 * MiB);
    big.heap.used = 380 * MiB; // past minExcessBytes, not twice
    expect(big.collection.check()).toBe(false);
    expect(heap.collections + big.heap.collections).toBe(0);
  });

  it('collects at most once a minIntervalMs, and counts growth from what the last collection left', () => {
    const { heap, collection } = fakeHeap(60 * MiB);
    heap.used = 300 * MiB;
    heap.live = 100 * MiB; // some of it was live: the next collection is judged against 100 MiB
    expect(collection.check()).toBe(true);
    heap.used = 150 * MiB;
    heap.at = 29_999;
    expect(collection.check()).toBe(false);
    heap.at = 30_000;
    heap.used = 190 * MiB; // under twice the 100 MiB left live, and no burst came back down
    expect(collection.check()).toBe(false);
    heap.used = 260 * MiB;
    expect(collection.check()).toBe(true);
    expect(heap.collections).toBe(2);
  });

  it('after a burst V8 brought back only part of the way by itself, collects once more when quiet', () => {
    const { heap, collection } = fakeHeap(60 * MiB);
    heap.used = 400 * MiB; // a burst, the requests holding
    heap.quiet = false;
    expect(collection.check()).toBe(false);
    heap.used = 70 * MiB; // V8 collected most of it; 10 MiB of garbage left
    heap.quiet = true;
    expect(collection.check()).toBe(true);
    expect(heap.used).toBe(60 * MiB);
    // No burst since: small growth is left alone.
    heap.used = 70 * MiB;
    heap.at = 60_000;
    expect(collection.check()).toBe(false);
  });

  it('tidies an idle gateway whose heap stays more than 10% above what the last collection left', () => {
    let idle = false;
    const heap = { used: 60 * MiB, collections: 0 };
    const collection = new IdleCollection({
      quiet: () => true,
      idle: () => idle,
      minExcessBytes: 64 * MiB,
      usedHeap: () => heap.used,
      collect: () => {
        heap.collections++;
        heap.used = 60 * MiB;
      },
      now: () => 0,
    });
    heap.used = 72 * MiB; // 20% over, far from a burst
    expect(collection.check()).toBe(false); // requests in flight
    idle = true;
    expect(collection.check()).toBe(false); // idle once: not yet
    expect(collection.check()).toBe(true); // idle at two looks in a row
    expect(heap.used).toBe(60 * MiB);
  });

  it("V8's own collections lower the mark growth is counted from", () => {
    const { heap, collection } = fakeHeap(200 * MiB);
    heap.used = 50 * MiB; // V8 collected by itself
    expect(collection.check()).toBe(false);
    heap.used = 180 * MiB; // twice 50 and 130 MiB more
    expect(collection.check()).toBe(true);
  });

  it("gives a real burst's garbage back with V8's own full collection", () => {
    const collect = fullCollection();
    collect();
    let collected: { before: number; after: number } | undefined;
    const collection = new IdleCollection({
      quiet: () => true,
      minExcessBytes: 32 * MiB,
      onCollected: (before, after) => {
        collected = { before, after };
      },
    });
    // About 100 MiB of objects that outlive a scavenge (kept until the burst ends), then dropped.
    let burst: Array<{ i: number; text: string }> | undefined = [];
    for (let i = 0; i < 1_000_000; i++) burst.push({ i, text: `a token of the burst ${i}` });
    expect(burst.length).toBe(1_000_000);
    burst = undefined;
    expect(collection.check()).toBe(true);
    expect(collected!.before - collected!.after).toBeGreaterThan(32 * MiB);
  });
});
