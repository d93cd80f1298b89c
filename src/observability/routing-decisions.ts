import { Ring } from './ring.js';

/** One routing decision that explained itself (the scorer's), as the dashboard lists it. */
export interface RoutingDecision {
  model: string;
  worker: string;
  /** The scorer that set the winner apart (`prefix`, `queue`, ...), `only_candidate` or `random_tie`. */
  decidedBy: string;
  /** Candidates left out, by filter. */
  filtered: Readonly<Record<string, number>>;
  /** The best candidates' weighted scores, winner first. */
  scores: readonly {
    readonly id: string;
    readonly total: number;
    readonly by: Readonly<Record<string, number>>;
  }[];
  /** Unix milliseconds. */
  at: number;
}

/**
 * The scorer's last decisions (a fixed-size ring) and how many each worker won by each scorer,
 * for the dashboard. Workers and scorer names are bounded sets; nothing here grows with traffic.
 */
export class RoutingDecisions {
  private readonly ring: Ring<RoutingDecision>;
  private readonly wins = new Map<string, Map<string, number>>();

  constructor(readonly capacity = 20) {
    this.ring = new Ring<RoutingDecision>(capacity);
  }

  push(entry: RoutingDecision): void {
    this.ring.push(entry);
    let byScorer = this.wins.get(entry.worker);
    if (!byScorer) {
      byScorer = new Map();
      this.wins.set(entry.worker, byScorer);
    }
    byScorer.set(entry.decidedBy, (byScorer.get(entry.decidedBy) ?? 0) + 1);
  }

  /** Newest first. */
  last(): RoutingDecision[] {
    return this.ring.toArray().reverse();
  }

  /** Decisions a worker won, by the scorer that decided them. */
  winsOf(worker: string): Record<string, number> {
    return Object.fromEntries(this.wins.get(worker) ?? []);
  }

  /** A worker left: its counts go. */
  forget(worker: string): void {
    this.wins.delete(worker);
  }
}
