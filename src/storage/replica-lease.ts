import { randomBytes } from 'node:crypto';
import type { Logger } from '../observability/logger.js';
import type { Store } from './types.js';

export interface LeaseSettings {
  /** How often the lease is renewed. */
  heartbeatMs: number;
  /** How long a lease lasts without renewal; past it, the replica counts as dead. */
  leaseMs: number;
}

/** What the orphan sweeper asks of this process's lease. */
export interface LeaseView {
  readonly id: string;
  /** Whether a lapsed lease of another replica may be taken for a dead replica now (see ReplicaLease). */
  mayJudgeOthers(): boolean;
}

/**
 * This gateway process's lease in the store: a row with a random replica id, renewed by a
 * heartbeat. Background responses name the replica that runs them; when its lease lapses
 * (the process was killed, or lost), any live replica ends them (see orphan-sweeper.ts).
 *
 * It also knows since when it has held its lease without a gap (on this process's monotonic
 * clock, `now`): a process that could not reach the store can conclude nothing about the leases
 * that lapsed meanwhile (the store's outage may have lapsed everyone's), so it takes another
 * replica's lapsed lease for a dead replica only once it has held its own for a whole lease
 * since: a live replica renews within that (every `heartbeatMs`, shorter than `leaseMs`).
 */
export class ReplicaLease implements LeaseView {
  readonly id = `replica_${randomBytes(9).toString('base64url')}`;
  private timer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private failing = false;
  /** Until when the lease surely holds (`now` ms): a renewal's start plus the lease. */
  private heldUntil = Number.NEGATIVE_INFINITY;
  /** Since when (`now` ms) it has held without a gap; undefined before the first renewal. */
  private heldSince: number | undefined;

  constructor(
    private readonly store: Store,
    private readonly settings: LeaseSettings,
    private readonly log: Logger,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Takes the lease (a store that cannot be written stops the start), then keeps it renewed. */
  async start(): Promise<void> {
    await this.renewOnce();
    this.timer = setInterval(() => this.renew(), this.settings.heartbeatMs);
    this.timer.unref();
  }

  mayJudgeOthers(): boolean {
    const now = this.now();
    return (
      now < this.heldUntil && this.heldSince !== undefined && now - this.heldSince >= this.settings.leaseMs
    );
  }

  /**
   * One renewal. The store stamps the new expiry somewhere between the call's start and its
   * answer, so the lease surely holds until the start plus the lease; and it held without a gap
   * only when the previous one surely still held at the answer.
   */
  private async renewOnce(): Promise<void> {
    const started = this.now();
    await this.store.renewReplicaLease(this.id, this.settings.leaseMs);
    const answered = this.now();
    if (this.heldSince === undefined || answered >= this.heldUntil) this.heldSince = answered;
    this.heldUntil = started + this.settings.leaseMs;
  }

  private renew(): void {
    if (this.renewing) return;
    this.renewing = this.renewOnce()
      .then(
        () => {
          if (this.failing) this.log.info({ replica: this.id }, 'replica lease renewed again');
          this.failing = false;
        },
        (err: unknown) => {
          // Past the lease, other replicas end this one's background responses: said loudly, once.
          if (!this.failing) this.log.error({ replica: this.id, err }, 'could not renew the replica lease');
          this.failing = true;
        },
      )
      .finally(() => {
        this.renewing = undefined;
      });
  }

  /** Stops renewing and drops the lease: what this process left unfinished is for others to end. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.renewing;
    try {
      await this.store.dropReplicaLease(this.id);
    } catch (err) {
      this.log.warn({ replica: this.id, err }, 'could not drop the replica lease; it lapses by itself');
    }
  }
}
