import { LRUCache } from 'lru-cache';

/**
 * Which workers were last sent which prompt prefixes, by block hash (prefix-blocks.ts): the
 * scorer's prefix-affinity source. A bounded LRU with a TTL: each block hash keeps the few
 * workers most recently sent a prompt through it, newest first. It learns from this gateway's
 * decisions (`record`) and, where several replicas run, from theirs (`apply`, fed by
 * src/replicas/affinity-sync.ts): a session's next turn finds the engine of its previous turn
 * whichever replica routed that one.
 */
export interface AffinityOptions {
  /** Characters per block (an engine block of 16 tokens is about 64 characters of English). */
  readonly blockChars: number;
  /** Blocks hashed per prompt, from its start. */
  readonly maxBlocks: number;
  /** Block hashes kept (least recently used dropped past it). */
  readonly maxEntries: number;
  /** How long a block hash is kept after it was last routed (an engine's cache turns over). */
  readonly ttlMs: number;
}

export const AFFINITY_DEFAULTS: AffinityOptions = {
  blockChars: 128,
  maxBlocks: 512,
  maxEntries: 200_000,
  ttlMs: 600_000,
};

/** Workers kept per block hash. */
const WORKERS_PER_BLOCK = 4;

/**
 * Told of each decision this gateway made (not of those applied from other replicas), with the
 * block hashes it taught: those whose most recent worker changed, and those not told for a
 * quarter of the TTL (so that what the others know of a block in use does not expire).
 */
export type AffinityListener = (hashes: readonly number[], workerId: string) => void;

interface Entry {
  /** Most recent first. */
  readonly workers: string[];
  /** When the listener was last told of it (or it came from another replica); undefined: news. */
  sharedAt: number | undefined;
}

export class AffinityIndex {
  readonly options: AffinityOptions;
  private readonly blocks: LRUCache<number, Entry>;
  private listener: AffinityListener | undefined;

  constructor(
    options: Partial<AffinityOptions> = {},
    private readonly now: () => number = performance.now.bind(performance),
  ) {
    this.options = { ...AFFINITY_DEFAULTS, ...options };
    this.blocks = new LRUCache<number, Entry>({
      max: this.options.maxEntries,
      ttl: this.options.ttlMs,
      ttlAutopurge: false,
      ttlResolution: 0,
      perf: { now },
    });
  }

  /** Block hashes kept now (expired ones may count until they are looked at). */
  get size(): number {
    return this.blocks.size;
  }

  /** Sets the one listener told of local decisions (the replicas' sync). */
  onRecord(listener: AffinityListener | undefined): void {
    this.listener = listener;
  }

  /** Notes that `workerId` was sent a prompt with these block hashes (and tells the listener). */
  record(hashes: readonly number[], workerId: string): void {
    if (hashes.length === 0) return;
    const listener = this.listener;
    const told: number[] = [];
    const now = this.now();
    const refresh = this.options.ttlMs / 4;
    for (const hash of hashes) {
      const entry = this.put(hash, workerId);
      if (listener && (entry.sharedAt === undefined || now - entry.sharedAt > refresh)) {
        entry.sharedAt = now;
        told.push(hash);
      }
    }
    if (listener && told.length > 0) listener(told, workerId);
  }

  /** `record` without telling the listener: a decision another replica made. */
  apply(hashes: readonly number[], workerId: string): void {
    const now = this.now();
    for (const hash of hashes) this.put(hash, workerId).sharedAt = now;
  }

  /**
   * Puts `workerId` first on the block's list and renews its time to live. A new entry, or one
   * whose first worker changed, has no `sharedAt` (it is news to tell).
   */
  private put(hash: number, workerId: string): Entry {
    let entry = this.blocks.get(hash);
    if (entry === undefined) {
      entry = { workers: [workerId], sharedAt: undefined };
    } else {
      const workers = entry.workers;
      const at = workers.indexOf(workerId);
      if (at !== 0) {
        if (at > 0) workers.splice(at, 1);
        else if (workers.length >= WORKERS_PER_BLOCK) workers.pop();
        workers.unshift(workerId);
        entry.sharedAt = undefined;
      }
    }
    this.blocks.set(hash, entry);
    return entry;
  }

  /**
   * For each allowed worker, how many of the prompt's blocks it holds from the start: the index
   * of the deepest block it was sent, plus one. The walk ends at the first block nobody was sent
   * (a block's hash covers every block before it: none past it can be known).
   */
  match(hashes: readonly number[], allowed?: ReadonlySet<string>): Map<string, number> {
    const depth = new Map<string, number>();
    for (let i = 0; i < hashes.length; i++) {
      const entry = this.blocks.get(hashes[i]!);
      if (entry === undefined) break;
      for (const id of entry.workers) if (!allowed || allowed.has(id)) depth.set(id, i + 1);
    }
    return depth;
  }
}
