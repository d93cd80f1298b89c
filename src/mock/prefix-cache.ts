/**
 * The engine model's KV cache: a pool of fixed-size blocks with automatic prefix caching, as
 * vLLM's block pool keeps it.
 *
 * - A block holds `blockSize` tokens. A full block computed for a request is registered under
 *   its hash (see engine-tokens.ts: a hash of its tokens and of its parent block's hash), so a
 *   later prompt hits a block only while the whole chain before it is cached too.
 * - Blocks in use by a request have a reference count; a block whose count falls to 0 stays
 *   cached but becomes free: it goes to the tail of the free queue, and new blocks are taken
 *   from its head, evicting the hash of a cached block taken so (LRU). A request's blocks are
 *   freed last block first, so the tail of a sequence is evicted before its shared prefix. A hit
 *   on a free cached block takes it out of the free queue.
 * - Usage is what vLLM reports as `kv_cache_usage_perc`: the share of blocks not free (cached
 *   free blocks count as free: they can be taken at any time).
 */
export class BlockPool {
  readonly capacity: number;
  /** Blocks evicted from the cache (a cached free block taken for new tokens). */
  evictions = 0;
  private readonly refs: Int32Array;
  /** Each block's hash while it is cached; NaN when it is not. */
  private readonly hashes: Float64Array;
  /** The free queue: a doubly linked list over block ids (-1 ends it). */
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  private readonly queued: Uint8Array;
  private head = -1;
  private tail = -1;
  private freeCount = 0;
  private readonly cached = new Map<number, number>();

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new Error(`capacity must be an integer >= 1, got ${capacity}`);
    this.capacity = capacity;
    this.refs = new Int32Array(capacity);
    this.hashes = new Float64Array(capacity).fill(Number.NaN);
    this.prev = new Int32Array(capacity).fill(-1);
    this.next = new Int32Array(capacity).fill(-1);
    this.queued = new Uint8Array(capacity);
    for (let id = 0; id < capacity; id++) this.append(id);
  }

  /** Blocks that can be taken: unused, cached or not. */
  get free(): number {
    return this.freeCount;
  }

  /** Blocks held by requests. */
  get used(): number {
    return this.capacity - this.freeCount;
  }

  /** Blocks registered in the prefix cache (in use or free). */
  get cachedBlocks(): number {
    return this.cached.size;
  }

  /** The share of blocks in use, 0 to 1. */
  usage(): number {
    return this.used / this.capacity;
  }

  /** The cached blocks of the longest prefix of `hashes` (at most `limit` of them), in chain order. */
  match(hashes: readonly number[], limit = hashes.length): number[] {
    const out: number[] = [];
    const n = Math.min(limit, hashes.length);
    for (let k = 0; k < n; k++) {
      const id = this.cached.get(hashes[k]!);
      if (id === undefined) break;
      out.push(id);
    }
    return out;
  }

  /** Whether `fresh` new blocks can be taken once the hit blocks `hit` are. */
  canTake(hit: readonly number[], fresh: number): boolean {
    let hitFree = 0;
    for (const id of hit) if (this.refs[id] === 0) hitFree++;
    return this.freeCount - hitFree >= fresh;
  }

  /**
   * Takes the hit blocks (one more reference each) and `fresh` new ones from the head of the free
   * queue, evicting what they cached. Returns the blocks in order: the hits, then the new ones.
   * The caller checks `canTake` first.
   */
  take(hit: readonly number[], fresh: number): number[] {
    const out: number[] = [];
    for (const id of hit) {
      if (this.refs[id] === 0) this.unlink(id);
      this.refs[id]!++;
      out.push(id);
    }
    for (let k = 0; k < fresh; k++) {
      const id = this.head;
      if (id < 0) throw new Error('no free block (canTake was not checked)');
      this.unlink(id);
      const hash = this.hashes[id]!;
      if (!Number.isNaN(hash)) {
        this.cached.delete(hash);
        this.hashes[id] = Number.NaN;
        this.evictions++;
      }
      this.refs[id] = 1;
      out.push(id);
    }
    return out;
  }

  /**
   * Registers block `id` (in use, full) under `hash`. A hash already cached (another request
   * computed the same block at the same time) keeps its block; this one stays uncached.
   */
  register(id: number, hash: number): boolean {
    if (!Number.isNaN(this.hashes[id]!) || this.cached.has(hash)) return false;
    this.hashes[id] = hash;
    this.cached.set(hash, id);
    return true;
  }

  /** Drops one reference to each block, last block first; a block no one uses goes to the free queue's tail. */
  release(blocks: readonly number[]): void {
    for (let k = blocks.length - 1; k >= 0; k--) {
      const id = blocks[k]!;
      if (this.refs[id]! <= 0) throw new Error(`block ${id} released more often than taken`);
      if (--this.refs[id]! === 0) this.append(id);
    }
  }

  /** Forgets every cached block, as vLLM's `reset_prefix_cache`: refused (false) while any block is in use. */
  reset(): boolean {
    if (this.freeCount !== this.capacity) return false;
    this.cached.clear();
    this.hashes.fill(Number.NaN);
    return true;
  }

  private append(id: number): void {
    this.prev[id] = this.tail;
    this.next[id] = -1;
    if (this.tail >= 0) this.next[this.tail] = id;
    else this.head = id;
    this.tail = id;
    this.queued[id] = 1;
    this.freeCount++;
  }

  private unlink(id: number): void {
    if (this.queued[id] === 0) return;
    const p = this.prev[id]!;
    const n = this.next[id]!;
    if (p >= 0) this.next[p] = n;
    else this.head = n;
    if (n >= 0) this.prev[n] = p;
    else this.tail = p;
    this.prev[id] = -1;
    this.next[id] = -1;
    this.queued[id] = 0;
    this.freeCount--;
  }
}
