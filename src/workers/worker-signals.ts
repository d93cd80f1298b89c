import type { EngineSignals, MetricNames, SignalsReading } from './engine-signals.js';

/** The `signals` settings a worker needs to judge its reading. */
export interface SignalOptions {
  /** Off: no worker is scraped, every reading is sluice's own counts. */
  readonly enabled: boolean;
  /** A reading older than this is stale: the worker counts as saturated. */
  readonly staleMs: number;
}

/** What the scraper (signal-scraper.ts) knows of one worker's `/metrics`; the worker reads it. */
export class WorkerSignals {
  /** The last good reading of the engine. */
  last: EngineSignals | undefined;
  /** Set while the worker has no usable `/metrics`: why, and until when it is not asked again. */
  missing: { readonly reason: string; readonly until: number } | undefined;
  /** Why the last scrape failed, while the reading is not refreshed. */
  failure: string | undefined;
  /** The scrape in flight (one at a time per worker). */
  inFlight: Promise<void> | undefined;
  /** When the next scrape is due (Unix ms). */
  nextAt = 0;
  /** The operator was told of adapter names refused (reported-names.ts), or past `signals.maxAdapters`: once. */
  namesRefusedLogged = false;
  adaptersCappedLogged = false;

  constructor(
    /** The names the worker is read with (`workers[].metrics.names`). */
    readonly names: MetricNames,
    /** The path of its metrics (`workers[].metrics.path`). */
    readonly path: string,
    private readonly options: SignalOptions,
  ) {}

  /** Whether the scraper reads this worker at all. */
  get scraped(): boolean {
    return this.options.enabled && this.names !== 'none';
  }

  /** The reading now; `local` gives sluice's own counts for a worker without usable `/metrics`. */
  reading(local: () => { waiting: number; running: number }, now: number): SignalsReading {
    if (!this.scraped || this.missing) {
      const reason = !this.options.enabled
        ? 'signals are off (signals.enabled)'
        : this.names === 'none'
          ? "the worker's metrics.names is none"
          : this.missing!.reason;
      return { state: 'missing', signals: localSignals(local(), now), reason };
    }
    const last = this.last;
    if (!last)
      return { state: 'stale', signals: undefined, ageMs: undefined, reason: this.failure ?? 'not read yet' };
    const ageMs = Math.max(0, now - last.scrapedAt);
    if (ageMs <= this.options.staleMs) return { state: 'fresh', signals: last, ageMs };
    return { state: 'stale', signals: last, ageMs, reason: this.failure ?? `no reading for ${ageMs} ms` };
  }
}

/** sluice's own counts of a worker in the shape of an engine's signals (`source: 'none'`). */
export function localSignals(counts: { waiting: number; running: number }, now: number): EngineSignals {
  return {
    waiting: counts.waiting,
    running: counts.running,
    kvCacheUsage: undefined,
    prefixCacheHits: undefined,
    prefixCacheQueries: undefined,
    prefixCacheHitRate: undefined,
    lora: undefined,
    scrapedAt: now,
    source: 'none',
  };
}
