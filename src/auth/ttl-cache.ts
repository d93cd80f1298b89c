interface Entry<V> {
  value: V;
  expiresAt: number;
}

/**
 * A bounded in-memory cache whose entries expire `ttlMs` after they are set. When full, the least
 * recently used entry is dropped (a Map iterates in insertion order; a hit re-inserts its entry).
 * Times are passed in, in milliseconds, so callers and tests control the clock.
 */
export class TtlCache<K, V> {
  private readonly entries = new Map<K, Entry<V>>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries: number,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  get(key: K, now: number): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    this.entries.delete(key);
    if (entry.expiresAt <= now) return undefined;
    this.entries.set(key, entry);
    return entry.value;
  }

  set(key: K, value: V, now: number): void {
    if (this.ttlMs <= 0 || this.maxEntries <= 0) return;
    this.entries.delete(key);
    this.entries.set(key, { value, expiresAt: now + this.ttlMs });
    for (const oldest of this.entries.keys()) {
      if (this.entries.size <= this.maxEntries) break;
      this.entries.delete(oldest);
    }
  }

  deleteWhere(matches: (value: V) => boolean): void {
    for (const [key, entry] of this.entries) {
      if (matches(entry.value)) this.entries.delete(key);
    }
  }

  clear(): void {
    this.entries.clear();
  }
}
