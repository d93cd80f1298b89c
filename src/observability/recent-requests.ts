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
  private readonly ring: (RecentRequest | undefined)[];
  private next = 0;
  private count = 0;

  constructor(readonly capacity = 200) {
    this.ring = new Array<RecentRequest | undefined>(capacity);
  }

  push(entry: RecentRequest): void {
    this.ring[this.next] = entry;
    this.next = (this.next + 1) % this.capacity;
    if (this.count < this.capacity) this.count++;
  }

  /** Oldest first. */
  list(): RecentRequest[] {
    const out: RecentRequest[] = [];
    const start = (this.next - this.count + this.capacity) % this.capacity;
    for (let i = 0; i < this.count; i++) out.push(this.ring[(start + i) % this.capacity]!);
    return out;
  }
}
