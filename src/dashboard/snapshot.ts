import type { SluiceConfig } from '../config/schema.js';
import { STREAM_FAILURE_REASONS } from '../errors/stream-errors.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { WorkerRegistry } from '../workers/registry.js';
import { type Buckets, MetricsHistory, type Sample } from './history.js';
import type { DashboardModel, DashboardSnapshot, DashboardWorker } from './snapshot-types.js';

export type { DashboardModel, DashboardSnapshot, DashboardWorker } from './snapshot-types.js';

/** What the dashboard reads of the gateway: its workers, its metrics, whether it drains, and its settings. */
export interface DashboardSources {
  readonly config: Pick<SluiceConfig, 'server'>;
  readonly metrics: GatewayMetrics;
  readonly registry: WorkerRegistry;
  readonly lifecycle: { readonly draining: boolean };
  /** Flow control, when on: its requests waiting, by model. */
  readonly dispatcher?: { readonly flow?: { waitingByModel(): Record<string, number> } | undefined };
}

/** Requests listed in a snapshot, newest first. */
export const RECENT_LIMIT = 50;

interface LabelledValue {
  value: number;
  labels: Partial<Record<string, string | number>>;
  metricName?: string;
}

const label = (v: LabelledValue, name: string): string => String(v.labels[name] ?? '');

function sumBy(values: readonly LabelledValue[], key: (v: LabelledValue) => string | undefined) {
  const out = new Map<string, number>();
  for (const v of values) {
    const k = key(v);
    if (k !== undefined) out.set(k, (out.get(k) ?? 0) + v.value);
  }
  return out;
}

/** Bucket counts per model, summed over routes, from a histogram's `get()` values. */
function bucketsByModel(values: readonly LabelledValue[]): Map<string, Buckets> {
  const perModel = new Map<string, Map<number, number>>();
  for (const v of values) {
    if (!v.metricName?.endsWith('_bucket')) continue;
    const le = v.labels.le;
    const bound = le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le);
    if (Number.isNaN(bound)) continue;
    const model = label(v, 'model');
    let byBound = perModel.get(model);
    if (!byBound) {
      byBound = new Map();
      perModel.set(model, byBound);
    }
    byBound.set(bound, (byBound.get(bound) ?? 0) + v.value);
  }
  const out = new Map<string, Buckets>();
  for (const [model, byBound] of perModel) {
    const sorted = [...byBound.entries()].sort((a, b) => a[0] - b[0]);
    out.set(model, {
      bounds: sorted.filter(([b]) => Number.isFinite(b)).map(([b]) => b),
      counts: sorted.map(([, c]) => c),
    });
  }
  return out;
}

function publicUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (!parsed.username && !parsed.password) return url;
    parsed.username = '';
    parsed.password = '';
    return parsed.toString().replace(/\/$/, '');
  } catch {
    return url;
  }
}

/**
 * Builds dashboard snapshots for one gateway. Each `build()` reads the metrics once, records a
 * sample in the history and derives the rates and quantiles from it: call it once per tick for
 * every dashboard, not once per client.
 */
export class SnapshotBuilder {
  readonly history: MetricsHistory;

  constructor(
    private readonly ctx: DashboardSources,
    readonly intervalMs = 1_000,
    history?: MetricsHistory,
  ) {
    this.history = history ?? new MetricsHistory();
  }

  /** Reads the metrics once and records a sample in the history (every tick, watched or not). */
  async record(now = Date.now()): Promise<void> {
    await this.sample(now);
  }

  private async sample(now: number) {
    const { metrics } = this.ctx;
    const [requests, ttft, itl, failures] = await Promise.all([
      metrics.requests.get(),
      metrics.timeToFirstToken.get(),
      metrics.interTokenLatency.get(),
      metrics.streamFailures.get(),
    ]);
    const sample: Sample = {
      t: now,
      requests: sumBy(requests.values, (v) => label(v, 'model')),
      errors: sumBy(requests.values, (v) => (Number(v.labels.status) >= 500 ? label(v, 'model') : undefined)),
      ttft: bucketsByModel(ttft.values),
      itl: bucketsByModel(itl.values),
      failures: sumBy(failures.values, (v) => label(v, 'reason')),
    };
    const point = this.history.push(sample);
    return { sample, point, failures };
  }

  async build(now = Date.now()): Promise<DashboardSnapshot> {
    const { sample, point, failures } = await this.sample(now);
    const metrics = this.ctx.metrics;
    const oldest = this.history.oldest() ?? point;

    const workers = this.ctx.registry.list().map((w): DashboardWorker => {
      const s = w.snapshot();
      return {
        id: s.id,
        url: publicUrl(s.url),
        models: [...s.models].sort(),
        healthy: s.healthy,
        circuit: s.circuit,
        inflight: s.inflight,
        queued: s.queued,
        maxConcurrent: s.maxConcurrent,
        load: s.maxConcurrent > 0 ? (s.inflight + s.queued) / s.maxConcurrent : 0,
        dpSize: s.dpSize,
        source: s.source,
        lastError: s.lastError,
        signals: {
          state: s.signals.state,
          source: s.signals.source,
          waiting: s.signals.waiting,
          running: s.signals.running,
          kvCacheUsage: s.signals.kvCacheUsage,
        },
        routedBy: metrics.decisions.winsOf(s.id),
      };
    });

    const failuresByModel = sumBy(failures.values, (v) => label(v, 'model'));
    const names = new Set<string>([...this.ctx.registry.models(), ...point.models.keys()]);
    const models = [...names].sort().map((model): DashboardModel => {
      const p = point.models.get(model);
      return {
        model,
        requests: sample.requests.get(model) ?? 0,
        errors: sample.errors.get(model) ?? 0,
        streamFailures: failuresByModel.get(model) ?? 0,
        rps: roundOrNull(p?.rps ?? null, 3),
        ttftP50Ms: roundOrNull(p?.ttftP50Ms ?? null, 1),
        ttftP95Ms: roundOrNull(p?.ttftP95Ms ?? null, 1),
        itlP50Ms: roundOrNull(p?.itlP50Ms ?? null, 2),
        itlP95Ms: roundOrNull(p?.itlP95Ms ?? null, 2),
      };
    });

    const reasons = new Set<string>([...STREAM_FAILURE_REASONS, ...sample.failures.keys()]);
    const byReason = [...reasons].map((reason) => {
      const total = sample.failures.get(reason) ?? 0;
      return { reason, total, window: Math.max(0, total - (oldest.failures.get(reason) ?? 0)) };
    });

    const recent = this.ctx.metrics.recent.list();
    return {
      version: 1,
      at: now,
      intervalMs: this.intervalMs,
      windows: {
        rateS: this.history.rateWindowMs / 1000,
        quantileS: this.history.quantileWindowMs / 1000,
        historyS: this.history.maxAgeMs / 1000,
      },
      gateway: {
        draining: this.ctx.lifecycle.draining,
        workers: workers.length,
        healthyWorkers: workers.filter((w) => w.healthy).length,
        inflight: workers.reduce((n, w) => n + w.inflight, 0),
        queued: workers.reduce((n, w) => n + w.queued, 0),
        pid: process.pid,
        processes: this.ctx.config.server.processes,
      },
      workers,
      models,
      series: this.history.series(),
      streamFailures: {
        total: [...sample.failures.values()].reduce((a, b) => a + b, 0),
        byReason,
        windowS: Math.round((point.t - oldest.t) / 1000),
        bySeries: failures.values
          .filter((v) => v.value > 0)
          .map((v) => ({
            api: label(v, 'api'),
            model: label(v, 'model'),
            reason: label(v, 'reason'),
            count: v.value,
          })),
      },
      recent: recent.slice(-RECENT_LIMIT).reverse(),
      routing: { last: metrics.decisions.last(), waiting: this.ctx.dispatcher?.flow?.waitingByModel() ?? {} },
    };
  }
}

function roundOrNull(value: number | null, digits: number): number | null {
  if (value === null || !Number.isFinite(value)) return null;
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}
