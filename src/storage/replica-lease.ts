import { randomBytes } from 'node:crypto';
import type { Logger } from '../observability/logger.js';
import type { Store } from './types.js';

export interface LeaseSettings {
  /** How often the lease is renewed. */
  heartbeatMs: number;
  /** How long a lease lasts without renewal; past it, the replica counts as dead. */
  leaseMs: number;
}

/**
 * This gateway process's lease in the store: a row with a random replica id, renewed by a
 * heartbeat. Background responses name the replica that runs them; when its lease lapses
 * (the process was killed, or lost), any live replica ends them (see orphan-sweeper.ts).
 */
export class ReplicaLease {
  readonly id = `replica_${randomBytes(9).toString('base64url')}`;
  private timer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private failing = false;

  constructor(
    private readonly store: Store,
    private readonly settings: LeaseSettings,
    private readonly log: Logger,
  ) {}

  /** Takes the lease (a store that cannot be written stops the start), then keeps it renewed. */
  async start(): Promise<void> {
    await this.store.renewReplicaLease(this.id, this.settings.leaseMs);
    this.timer = setInterval(() => this.renew(), this.settings.heartbeatMs);
    this.timer.unref();
  }

  private renew(): void {
    if (this.renewing) return;
    this.renewing = this.store
      .renewReplicaLease(this.id, this.settings.leaseMs)
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
