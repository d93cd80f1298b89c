import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { StreamFailureReason } from '../errors/stream-errors.js';
import type { CircuitState } from '../workers/circuit-breaker.js';
import type { WorkerSnapshot } from '../workers/worker.js';
import { modelLabel } from './model-label.js';
import { RecentRequests } from './recent-requests.js';
import { RoutingDecisions } from './routing-decisions.js';

const CIRCUIT_VALUE: Record<CircuitState, number> = { closed: 0, half_open: 1, open: 2 };

interface HistogramSeries {
  labels: Record<string, string | number>;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

/** What `seriesObserver` reads of a prom-client (15.x) Histogram. */
interface HistogramInternals {
  hashMap: Record<string, HistogramSeries>;
  upperBounds: readonly number[];
}

function sameLabels(a: Record<string, string | number>, b: Record<string, string>): boolean {
  const keys = Object.keys(b);
  if (Object.keys(a).length !== keys.length) return false;
  for (const key of keys) if (String(a[key]) !== b[key]) return false;
  return true;
}

/** The bucket keys of a histogram's bounds as text, made once per histogram (a stream opens an observer). */
const bucketKeyCache = new WeakMap<readonly number[], readonly string[]>();

function bucketKeys(bounds: readonly number[]): readonly string[] {
  let keys = bucketKeyCache.get(bounds);
  if (keys === undefined) {
    keys = bounds.map(String);
    bucketKeyCache.set(bounds, keys);
  }
  return keys;
}

/** Observations folded before they are added to the series (see seriesObserver). */
const FOLD_COUNT = 64;
/** ... or once they add up to this much (the gaps of one stream: about its time since the last fold). */
const FOLD_SUM = 1;

/** Observations of one histogram series, folded and added to it in batches. */
export interface SeriesObserver {
  observe(value: number): void;
  /** Adds what is folded to the series now (the stream ended). */
  flush(): void;
}

/**
 * Observes one series of a histogram, for what is observed once per relayed event (the gap
 * between events). prom-client's `observe` copies, checks and hashes the labels on every call,
 * which per event costs as much as the rest of the event's inspection. This counts the values by
 * bucket in a typed array and adds the counts to the series as prom-client's `observe` would have,
 * every 64 values, once they add up to a second, and on `flush`: a scrape lags a stream by at most
 * that much. The series is found once, and again whenever prom-client replaced it (a reset, a
 * zero, a remove). It falls back to `observe` if the Histogram is not laid out as expected.
 */
export function seriesObserver<T extends string>(
  histogram: Histogram<T>,
  labels: Record<T, string>,
): SeriesObserver {
  const internals = histogram as unknown as Partial<HistogramInternals>;
  const bounds = internals.upperBounds;
  if (typeof internals.hashMap !== 'object' || internals.hashMap === null || !Array.isArray(bounds)) {
    return { observe: (value) => histogram.observe(labels, value), flush: () => {} };
  }
  const keys = bucketKeys(bounds);
  const counts = new Float64Array(bounds.length);
  let count = 0;
  let sum = 0;
  let map: Record<string, HistogramSeries> | undefined;
  let key = '';
  let series: HistogramSeries | undefined;
  /** The series of `labels` in the histogram as it is now, made (empty) if it has none. */
  const currentSeries = (): HistogramSeries | undefined => {
    if (series !== undefined && map !== undefined && internals.hashMap === map && map[key] === series) {
      return series;
    }
    series = undefined;
    for (let attempt = 0; attempt < 2 && series === undefined; attempt++) {
      map = internals.hashMap;
      for (const [k, s] of Object.entries(map ?? {})) {
        if (sameLabels(s.labels, labels)) {
          key = k;
          series = s;
          break;
        }
      }
      // None: prom-client makes it, all buckets at zero (there is nothing of it to wipe).
      if (series === undefined && attempt === 0) histogram.zero(labels);
    }
    return series;
  };
  const flush = () => {
    if (count === 0) return;
    const target = currentSeries();
    if (target !== undefined) {
      target.sum += sum;
      target.count += count;
      const buckets = target.bucketValues as Record<string, number>;
      for (let i = 0; i < counts.length; i++) {
        const n = counts[i]!;
        if (n === 0) continue;
        const bucket = keys[i]!;
        if (Object.hasOwn(buckets, bucket)) buckets[bucket]! += n;
      }
    }
    counts.fill(0);
    count = 0;
    sum = 0;
  };
  return {
    observe(value) {
      if (!Number.isFinite(value)) {
        histogram.observe(labels, value);
        return;
      }
      sum += value;
      count += 1;
      // Past the last bound a value is counted in +Inf only, which prom-client derives from count.
      for (let i = 0; i < bounds.length; i++) {
        if (value <= bounds[i]!) {
          counts[i]! += 1;
          break;
        }
      }
      if (count >= FOLD_COUNT || sum >= FOLD_SUM) flush();
    },
    flush,
  };
}

export type ApiName =
  | 'chat_completions'
  | 'completions'
  | 'responses'
  | 'messages'
  | 'embeddings'
  | 'rerank'
  | 'score'
  | 'tokenize';

/** The histograms labelled by route and model. */
type RouteModelHistogram = Histogram<'route' | 'model'>;

/** Every metric of one gateway, on its own registry so that several gateways can share a process. */
export class GatewayMetrics {
  readonly registry = new Registry();

  readonly requests = new Counter({
    name: 'sluice_requests_total',
    help: 'Requests answered by the gateway, by route, model and HTTP status.',
    labelNames: ['route', 'model', 'status'] as const,
    registers: [this.registry],
  });

  readonly requestDuration: RouteModelHistogram = new Histogram({
    name: 'sluice_request_duration_seconds',
    help: 'Time from receiving a request to its last byte, by route and model.',
    labelNames: ['route', 'model'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    registers: [this.registry],
    collect: (): void => this.flushFolds(this.requestDuration),
  });

  readonly timeToFirstToken: RouteModelHistogram = new Histogram({
    name: 'sluice_time_to_first_token_seconds',
    help: 'Time from receiving a streaming request to relaying its first event, by route and model.',
    labelNames: ['route', 'model'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
    collect: (): void => this.flushFolds(this.timeToFirstToken),
  });

  readonly interTokenLatency: RouteModelHistogram = new Histogram({
    name: 'sluice_inter_token_latency_seconds',
    help: 'Time between two events relayed on one stream, by route and model.',
    labelNames: ['route', 'model'] as const,
    buckets: [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
    collect: (): void => this.flushFolds(this.interTokenLatency),
  });

  /** The last finished requests, for the dashboard. */
  readonly recent = new RecentRequests();
  /** The scorer's last decisions and each worker's wins by scorer (the dashboard's). */
  readonly decisions = new RoutingDecisions();

  readonly inflight = new Gauge({
    name: 'sluice_inflight_requests',
    help: 'Requests being served by the gateway now, by route.',
    labelNames: ['route'] as const,
    registers: [this.registry],
  });

  readonly retries = new Counter({
    name: 'sluice_upstream_retries_total',
    help: 'Upstream attempts retried (before the first byte), by model and the error code that caused them.',
    labelNames: ['model', 'code'] as const,
    registers: [this.registry],
  });

  readonly upstreamAttempts = new Counter({
    name: 'sluice_upstream_attempts_total',
    help: 'Requests sent to workers, by worker and outcome (ok or an error code).',
    labelNames: ['worker', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly streamFailures = new Counter({
    name: 'sluice_stream_failures_total',
    help: 'Streams that failed after their first byte, by API, model and reason (a closed set).',
    labelNames: ['api', 'model', 'reason'] as const,
    registers: [this.registry],
  });

  readonly fallbacks = new Counter({
    name: 'sluice_fallbacks_total',
    help: "Requests moved to their next model (models.<m>.fallbacks or the request's fallbacks), by the model they left, the one they went to (served models only) and why.",
    labelNames: ['from', 'to', 'reason'] as const,
    registers: [this.registry],
  });

  readonly streamResumes = new Counter({
    name: 'sluice_stream_resumes_total',
    help: 'Mid-stream resumes on another worker, by model and outcome (resumed, exhausted, unsafe, no_worker).',
    labelNames: ['model', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly clientDisconnects = new Counter({
    name: 'sluice_client_disconnects_total',
    help: 'Requests whose client went away before the response ended, by API and model.',
    labelNames: ['api', 'model'] as const,
    registers: [this.registry],
  });

  readonly circuitTransitions = new Counter({
    name: 'sluice_circuit_transitions_total',
    help: "Circuit breaker state changes, by worker, model (empty: the worker's own circuit) and the state entered.",
    labelNames: ['worker', 'model', 'state'] as const,
    registers: [this.registry],
  });

  readonly breakerPanics = new Counter({
    name: 'sluice_breaker_panic_total',
    help: 'Requests routed to ejected workers because every healthy worker of their model was ejected (panic mode), by model.',
    labelNames: ['model'] as const,
    registers: [this.registry],
  });

  readonly ejectionsRefused = new Counter({
    name: 'sluice_breaker_ejections_refused_total',
    help: 'Circuits kept closed because the model already had its maximum share of workers ejected, by worker and model.',
    labelNames: ['worker', 'model'] as const,
    registers: [this.registry],
  });

  readonly routingDecisions = new Counter({
    name: 'sluice_routing_decisions_total',
    help: 'Workers chosen by the scorer policy, by model, worker and the scorer that set the winner apart (prefix, queue, kvCache, lora, inflight, only_candidate, random_tie).',
    labelNames: ['model', 'worker', 'decided_by'] as const,
    registers: [this.registry],
  });

  readonly flowQueued = new Gauge({
    name: 'sluice_flow_queued',
    help: 'Requests waiting in the gateway for a worker that is not saturated (flow control), by model and priority class.',
    labelNames: ['model', 'priority'] as const,
    registers: [this.registry],
  });

  readonly flowWait = new Histogram({
    name: 'sluice_flow_wait_seconds',
    help: 'Time requests waited in the gateway for a worker that is not saturated, by model and priority class (admitted ones).',
    labelNames: ['model', 'priority'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });

  readonly flowRejections = new Counter({
    name: 'sluice_flow_rejections_total',
    help: 'Requests answered 429 fleet_saturated (their queue deadline passed, would have, or the queue was full), by model and priority class.',
    labelNames: ['model', 'priority'] as const,
    registers: [this.registry],
  });

  readonly admissionRejections = new Counter({
    name: 'sluice_admission_rejections_total',
    help: 'Requests refused with 503 because no worker could take them, by model and code.',
    labelNames: ['model', 'code'] as const,
    registers: [this.registry],
  });

  readonly storeWriteFailures = new Counter({
    name: 'sluice_store_write_failures_total',
    help: 'Responses whose final write failed (the client got store_write_failed), by backend and store error code.',
    labelNames: ['backend', 'code'] as const,
    registers: [this.registry],
  });

  readonly storeRetries = new Counter({
    name: 'sluice_store_retries_total',
    help: 'Store operations tried again after an attempt failed while the database was unreachable, by backend and operation.',
    labelNames: ['backend', 'operation'] as const,
    registers: [this.registry],
  });

  readonly pdfParses = new Counter({
    name: 'sluice_pdf_parses_total',
    help: 'PDFs read on a PDF thread, by outcome (text, empty, unreadable, time, memory, error); files read before are not counted.',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly pdfCacheHits = new Counter({
    name: 'sluice_pdf_cache_hits_total',
    help: 'PDFs whose text (or refusal) was known by their content hash, so not read again.',
    registers: [this.registry],
  });

  readonly replicaShareFailures = new Counter({
    name: 'sluice_replica_share_failures_total',
    help: 'What failed sharing with the other replicas through Redis, by channel (affinity, loads, flow) and cause (unreachable, script, oversize, malformed, peer_limit, forged).',
    labelNames: ['channel', 'cause'] as const,
    registers: [this.registry],
  });

  readonly signalScrapeFailures = new Counter({
    name: 'sluice_worker_signal_scrape_failures_total',
    help: "Reads of a worker's engine metrics (/metrics) that failed, by worker and cause (timeout, unreachable, http_error, too_large, not_found, not_prometheus, no_known_metrics, invalid_values).",
    labelNames: ['worker', 'cause'] as const,
    registers: [this.registry],
  });

  readonly websocketRefusals = new Counter({
    name: 'sluice_websocket_upgrades_refused_total',
    help: 'WebSocket upgrades refused before the 101, by reason (origin, connections, client_connections).',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  private knowsModel: (model: string) => boolean = () => false;

  /** The folded observers of the route and model histograms: histogram, then route, then model. */
  private readonly folds = new Map<RouteModelHistogram, Map<string, Map<string, SeriesObserver>>>();

  /**
   * The one folded observer (seriesObserver) of a route and model series of a histogram, shared
   * by every request and stream of that series: prom-client's `observe` checks and hashes the
   * labels on every call, and an observer made per stream costs its own closures and counts.
   * What is folded is added to the series before every read of the histogram (a scrape, the
   * dashboard), so reads are exact; `model` must be a bounded label (see modelLabel).
   */
  folded(histogram: RouteModelHistogram, route: string, model: string): SeriesObserver {
    let byRoute = this.folds.get(histogram);
    if (byRoute === undefined) {
      byRoute = new Map();
      this.folds.set(histogram, byRoute);
    }
    let byModel = byRoute.get(route);
    if (byModel === undefined) {
      byModel = new Map();
      byRoute.set(route, byModel);
    }
    let observer = byModel.get(model);
    if (observer === undefined) {
      observer = seriesObserver(histogram, { route, model });
      byModel.set(model, observer);
    }
    return observer;
  }

  private flushFolds(histogram: RouteModelHistogram): void {
    const byRoute = this.folds.get(histogram);
    if (byRoute === undefined) return;
    for (const byModel of byRoute.values()) for (const observer of byModel.values()) observer.flush();
  }

  /** Where the gateway learns which models exist (the worker registry), for `modelLabel`. */
  bindModels(knows: (model: string) => boolean): void {
    this.knowsModel = knows;
  }

  /** The label of a model on every metric: itself when a worker serves it, else `unknown`. */
  modelLabel(model: unknown): string {
    return modelLabel(this.knowsModel, model);
  }

  /** The gauges of what requests hold of answers being built, read at scrape time. */
  bindHeld(held: { readonly inUse: number; readonly capacity: number }): void {
    new Gauge({
      name: 'sluice_held_bytes',
      help: 'Bytes the requests in flight hold of answers being built past their 1 MiB floors (limits.maxHeldBytes bounds it).',
      registers: [this.registry],
      collect() {
        this.set(held.inUse);
      },
    });
    new Gauge({
      name: 'sluice_held_bytes_limit',
      help: 'limits.maxHeldBytes: what the requests in flight may hold together past their floors.',
      registers: [this.registry],
      collect() {
        this.set(held.capacity);
      },
    });
  }

  /** Gauges read from the worker registry at scrape time. */
  bindWorkers(list: () => readonly WorkerSnapshot[]): void {
    // `aggregator`: how a cluster's processes' values combine (src/cluster/metrics-ipc.ts).
    const gauge = (
      name: string,
      help: string,
      value: (w: WorkerSnapshot) => number,
      aggregator: 'sum' | 'min' | 'max' = 'sum',
    ) =>
      new Gauge({
        name,
        help,
        aggregator,
        labelNames: ['worker'] as const,
        registers: [this.registry],
        collect() {
          this.reset();
          for (const worker of list()) this.set({ worker: worker.id }, value(worker));
        },
      });
    gauge(
      'sluice_worker_healthy',
      'Whether a worker passes its health checks (1) or not (0).',
      (w) => (w.healthy ? 1 : 0),
      'min',
    );
    gauge('sluice_worker_inflight_requests', 'Requests in flight on a worker.', (w) => w.inflight);
    gauge('sluice_worker_queued_requests', 'Requests waiting for a slot on a worker.', (w) => w.queued);
    gauge(
      'sluice_worker_circuit_state',
      'Circuit breaker state of a worker, the worst of its own and its per-model circuits: 0 closed, 1 half-open, 2 open.',
      (w) => CIRCUIT_VALUE[w.circuit],
      'max',
    );
    new Gauge({
      name: 'sluice_worker_model_circuit_state',
      help: 'Circuit breaker state of a worker for one model: 0 closed, 1 half-open, 2 open.',
      aggregator: 'max',
      labelNames: ['worker', 'model'] as const,
      registers: [this.registry],
      collect() {
        this.reset();
        for (const worker of list()) {
          for (const [model, state] of Object.entries(worker.modelCircuits)) {
            this.set({ worker: worker.id, model }, CIRCUIT_VALUE[state]);
          }
        }
      },
    });
  }

  /** The text of a scrape; a cluster process replaces it with a scrape of every process. */
  scrape: () => Promise<string> = () => this.registry.metrics();

  constructor(withDefaultMetrics = true) {
    if (withDefaultMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'sluice_' });
  }

  streamFailed(api: ApiName, model: string, reason: StreamFailureReason): void {
    this.streamFailures.inc({ api, model: this.modelLabel(model), reason });
  }

  clientGone(api: ApiName, model: string): void {
    this.clientDisconnects.inc({ api, model: this.modelLabel(model) });
  }
}
