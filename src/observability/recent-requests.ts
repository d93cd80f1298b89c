import { Ring } from './ring.js';

/** One finished request, as the dashboard lists it. */
export interface RecentRequest {
  requestId: string;
  route: string;
  model: string;
  status: number;
  /** completed, failed, client_gone, error, queued, ... */
  outcome: string;
  /** The stable error code when it did not complete. */
  code: string | undefined;
  worker: string | undefined;
  durationMs: number;
  ttftMs: number | undefined;
  /** Unix milliseconds. */
  at: number;
}

/** The last `capacity` finished requests, newest last (a fixed-size ring, no growth). */
export class RecentRequests {
  private readonly ring: Ring<RecentRequest>;

  constructor(readonly capacity = 200) {
    this.ring = new Ring<RecentRequest>(capacity);
  }

  push(entry: RecentRequest): void {
    this.ring.push(entry);
  }

  /** Oldest first. */
  list(): RecentRequest[] {
    return this.ring.toArray();
  }
}
