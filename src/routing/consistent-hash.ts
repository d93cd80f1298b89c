import { hash32 } from './hash.js';
import { leastLoaded } from './least-loaded.js';
import type { Candidate, ConsistentHashOptions, RouteContext, RoutingPolicy } from './types.js';

export const CONSISTENT_HASH_DEFAULTS: ConsistentHashOptions = { virtualNodes: 160 };

interface Ring {
  readonly ids: ReadonlySet<string>;
  /** Point hashes, ascending; `owners[i]` is the worker of `points[i]`. */
  readonly points: Uint32Array;
  readonly owners: readonly string[];
}

/**
 * Maps a session key to the first ring point clockwise of its hash, so that a key keeps its worker
 * and a worker joining or leaving moves only about 1/n of the keys.
 */
export class ConsistentHashPolicy implements RoutingPolicy {
  readonly name = 'consistent_hash';
  private readonly virtualNodes: number;
  private ring: Ring | undefined;
  private rotation = 0;

  constructor(options: Partial<ConsistentHashOptions> = {}) {
    this.virtualNodes = options.virtualNodes ?? CONSISTENT_HASH_DEFAULTS.virtualNodes;
  }

  select(candidates: readonly Candidate[], ctx: RouteContext): Candidate {
    const key = ctx.hashKey;
    if (!key) return leastLoaded(candidates, this.rotation++);
    const owner = ownerOf(this.ringFor(candidates), key);
    return candidates.find((c) => c.id === owner)!;
  }

  removeWorker(workerId: string): void {
    if (this.ring?.ids.has(workerId)) this.ring = undefined;
  }

  private ringFor(candidates: readonly Candidate[]): Ring {
    if (!this.ring || !sameIds(this.ring.ids, candidates)) {
      this.ring = buildRing(candidates, this.virtualNodes);
    }
    return this.ring;
  }
}

/** The owner of the first point at or after the key's hash, wrapping past the top. */
function ownerOf({ points, owners }: Ring, key: string): string {
  const h = hash32(key);
  let lo = 0;
  let hi = points.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (points[mid]! < h) lo = mid + 1;
    else hi = mid;
  }
  return owners[lo === points.length ? 0 : lo]!;
}

function sameIds(ids: ReadonlySet<string>, candidates: readonly Candidate[]): boolean {
  if (ids.size !== candidates.length) return false;
  for (const c of candidates) if (!ids.has(c.id)) return false;
  return true;
}

function buildRing(candidates: readonly Candidate[], virtualNodes: number): Ring {
  const entries: { point: number; owner: string }[] = [];
  for (const { id } of candidates) {
    for (let v = 0; v < virtualNodes; v++) entries.push({ point: hash32(`${id}#${v}`), owner: id });
  }
  // Ties between workers are broken by id so that the ring does not depend on candidate order.
  entries.sort((a, b) => a.point - b.point || (a.owner < b.owner ? -1 : a.owner > b.owner ? 1 : 0));
  return {
    ids: new Set(candidates.map((c) => c.id)),
    points: Uint32Array.from(entries, (e) => e.point),
    owners: entries.map((e) => e.owner),
  };
}
