import type { Logger } from '../observability/logger.js';

/** Receives each snapshot, serialized once for every subscriber. */
export type SnapshotListener = (json: string) => void;

export interface HubOptions {
  intervalMs?: number;
  /** How long a poll of the snapshot keeps the timer running without a subscriber (default 10 s). */
  pollLeaseMs?: number;
  /**
   * Called on the ticks nobody watches, when given: the timer then never stops, so that what the
   * page plots (rates, TTFT, ITL) is recorded all the time and is full when the page opens.
   */
  record?: () => Promise<unknown>;
}

/**
 * One shared timer that builds a snapshot every `intervalMs` while someone watches (an SSE
 * subscriber, or a poll within the last `pollLeaseMs`), and hands the same JSON text to all of
 * them. With nobody watching, only `record` runs (a sample of the metrics for the history), or,
 * without it, the timer is stopped and nothing is computed.
 */
export class DashboardHub {
  readonly intervalMs: number;
  private readonly pollLeaseMs: number;
  private readonly listeners = new Set<SnapshotListener>();
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<string> | undefined;
  private latestJson: string | undefined;
  private latestAt = 0;
  private leaseUntil = 0;
  private closed = false;

  constructor(
    private readonly build: () => Promise<unknown>,
    private readonly log: Logger,
    options: HubOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? 1_000;
    this.pollLeaseMs = options.pollLeaseMs ?? 10_000;
    this.record = options.record;
    if (this.record) this.ensureTimer();
  }

  private readonly record: (() => Promise<unknown>) | undefined;
  private recording: Promise<unknown> | undefined;

  get subscribers(): number {
    return this.listeners.size;
  }

  get running(): boolean {
    return this.timer !== undefined;
  }

  /**
   * Adds a listener: it gets the current snapshot at once, then one per tick. Returns the
   * function that removes it.
   */
  subscribe(listener: SnapshotListener): () => void {
    if (this.closed) return () => {};
    this.listeners.add(listener);
    this.ensureTimer();
    void this.current().then(
      (json) => {
        if (this.listeners.has(listener)) listener(json);
      },
      () => {},
    );
    return () => {
      this.listeners.delete(listener);
    };
  }

  /** The snapshot of this tick (built now if the last one is stale); keeps the timer alive a while. */
  async poll(): Promise<string> {
    this.leaseUntil = Date.now() + this.pollLeaseMs;
    this.ensureTimer();
    return this.current();
  }

  /** Stops the timer and forgets every listener. */
  close(): void {
    this.closed = true;
    this.listeners.clear();
    this.stopTimer();
  }

  private current(): Promise<string> {
    if (this.latestJson !== undefined && Date.now() - this.latestAt < this.intervalMs * 1.5) {
      return Promise.resolve(this.latestJson);
    }
    return this.refresh();
  }

  /** Builds a snapshot, sharing a build already under way. */
  private refresh(): Promise<string> {
    if (this.inFlight) return this.inFlight;
    const building = (async () => {
      try {
        const json = JSON.stringify(await this.build());
        this.latestJson = json;
        this.latestAt = Date.now();
        return json;
      } finally {
        this.inFlight = undefined;
      }
    })();
    this.inFlight = building;
    return building;
  }

  private ensureTimer(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    // The dashboard never keeps the process alive.
    this.timer.unref();
  }

  private stopTimer(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    // The next viewer starts from a fresh snapshot, not one from before the pause.
    this.latestJson = undefined;
  }

  private tick(): void {
    if (this.listeners.size === 0 && Date.now() >= this.leaseUntil) {
      if (!this.record) {
        this.stopTimer();
        return;
      }
      // Nobody watches: keep the history going, build nothing else.
      this.latestJson = undefined;
      if (this.recording || this.inFlight) return;
      this.recording = this.record()
        .catch((err: unknown) => this.log.warn({ err }, 'dashboard sample failed'))
        .finally(() => {
          this.recording = undefined;
        });
      return;
    }
    // A build slower than the interval is not stacked: the next tick shares it.
    if (this.inFlight) return;
    this.refresh().then(
      (json) => {
        for (const listener of this.listeners) {
          try {
            listener(json);
          } catch (err) {
            this.log.warn({ err }, 'dashboard listener failed');
          }
        }
      },
      (err: unknown) => this.log.warn({ err }, 'dashboard snapshot failed'),
    );
  }
}
