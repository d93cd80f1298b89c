/**
 * What a dashboard snapshot is: the JSON of `GET /dashboard/data` and of each event of
 * `GET /dashboard/events`. Types only, and imports types only from files that import nothing:
 * the browser script (src/dashboard/client/) is compiled against these very declarations under
 * DOM types, without the gateway's code, so the page and the server cannot drift apart.
 * `snapshot.ts` builds them and re-exports them.
 */
import type { RecentRequest } from '../observability/recent-requests.js';
import type { RoutingDecision } from '../observability/routing-decisions.js';
import type { CircuitState } from '../workers/circuit-breaker.js';
import type { SignalSource, SignalsReading } from '../workers/engine-signals.js';
import type { SeriesJson } from './history.js';

export interface DashboardWorker {
  id: string;
  /** The worker URL without any user:password part. */
  url: string;
  models: string[];
  healthy: boolean;
  circuit: CircuitState;
  inflight: number;
  queued: number;
  maxConcurrent: number;
  /** (in-flight + queued) / maxConcurrent: 1 is a full worker, above 1 requests are waiting. */
  load: number;
  dpSize: number;
  source: 'static' | 'admin' | 'discovery';
  lastError: { code: string; message: string } | null;
  /**
   * What its engine reports of its load (`/metrics`; see src/workers/engine-signals.ts): `stale`
   * counts as saturated, `missing` shows sluice's own counts (`source: 'none'`).
   */
  signals: {
    state: SignalsReading['state'];
    source: SignalSource | null;
    waiting: number | null;
    running: number | null;
    /** 0..1; null when the engine does not say. */
    kvCacheUsage: number | null;
  };
  /** Scorer decisions this worker won, by the scorer that set it apart (`prefix`, `queue`, ...). */
  routedBy: Record<string, number>;
}

export interface DashboardModel {
  model: string;
  /** Finished requests since the gateway started (every route and status). */
  requests: number;
  /** Of those, answered with a 5xx status. */
  errors: number;
  /** Stream failures after the first byte since the gateway started. */
  streamFailures: number;
  /** Requests per second over the rate window; null before two samples exist. */
  rps: number | null;
  ttftP50Ms: number | null;
  ttftP95Ms: number | null;
  itlP50Ms: number | null;
  itlP95Ms: number | null;
}

export interface DashboardSnapshot {
  version: 1;
  /** Unix milliseconds. */
  at: number;
  intervalMs: number;
  /** What the rates and quantiles average over, and how far back the series go. */
  windows: { rateS: number; quantileS: number; historyS: number };
  gateway: {
    draining: boolean;
    workers: number;
    healthyWorkers: number;
    inflight: number;
    queued: number;
    /** The process this snapshot is from, and how many gateway processes share the port (`--processes`). */
    pid: number;
    processes: number;
  };
  workers: DashboardWorker[];
  /** Every model served by a worker or seen in the metrics, by name. */
  models: DashboardModel[];
  series: SeriesJson;
  streamFailures: {
    total: number;
    /** Every reason of the closed set, zeros included; `window` counts those within `windowS`. */
    byReason: Array<{ reason: string; total: number; window: number }>;
    /** Seconds actually covered by `window` (up to `windows.historyS`). */
    windowS: number;
    /** Non-zero series only. */
    bySeries: Array<{ api: string; model: string; reason: string; count: number }>;
  };
  /** The last finished requests, newest first, at most RECENT_LIMIT (snapshot.ts). */
  recent: RecentRequest[];
  /** The scorer's last decisions, newest first; and requests waiting in flow control, by model. */
  routing: { last: RoutingDecision[]; waiting: Record<string, number> };
}
