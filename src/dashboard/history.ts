/**
 * The dashboard's short memory: cumulative metric samples taken once a second, and the rates and
 * quantiles derived from the deltas between them. Everything is bounded: a few raw samples (as many
 * as the widest window needs) and at most `capacity` derived points, never older than `maxAgeMs`.
 */

import { Ring } from '../observability/ring.js';

export { Ring };

/** One histogram series: bucket upper bounds (seconds, `+Inf` excluded) and cumulative counts (`+Inf` last). */
export interface Buckets {
  bounds: readonly number[];
  counts: readonly number[];
}

/** Cumulative values read from the metrics at one instant. */
export interface Sample {
  /** Unix milliseconds. */
  t: number;
  /** Finished requests per model (every route and status). */
  requests: ReadonlyMap<string, number>;
  /** Finished requests per model answered with a 5xx status. */
  errors: ReadonlyMap<string, number>;
  /** Time-to-first-token bucket counts per model (every route). */
  ttft: ReadonlyMap<string, Buckets>;
  /** Inter-token latency bucket counts per model (every route). */
  itl: ReadonlyMap<string, Buckets>;
  /** Stream failures per reason (every API and model). */
  failures: ReadonlyMap<string, number>;
}

/** What one model did around one instant; `null` when there is nothing to say (no data). */
export interface ModelPoint {
  rps: number | null;
  ttftP50Ms: number | null;
  ttftP95Ms: number | null;
  itlP50Ms: number | null;
  itlP95Ms: number | null;
}

/** One derived point per sample. */
export interface Point {
  t: number;
  models: ReadonlyMap<string, ModelPoint>;
  /** Cumulative failures per reason at `t`, to count failures over the window. */
  failures: ReadonlyMap<string, number>;
}

export interface HistoryOptions {
  /** Requests per second are averaged over this trailing window (default 5 s). */
  rateWindowMs?: number;
  /** Quantiles are computed over the observations of this trailing window (default 10 s). */
  quantileWindowMs?: number;
  /** Derived points kept (default 300). */
  capacity?: number;
  /** Derived points older than this are dropped (default 300 s). */
  maxAgeMs?: number;
  /** A gap this long between two samples (the timer was stopped) restarts the deltas (default 5 s). */
  gapMs?: number;
}

/**
 * The q-quantile (0..1) of the observations counted by cumulative `counts` (`+Inf` last) over
 * buckets with upper `bounds`, interpolated linearly inside the bucket, as Prometheus'
 * `histogram_quantile` does. `null` when there is no observation. A quantile in the `+Inf`
 * bucket is reported as the largest finite bound.
 */
export function histogramQuantile(
  bounds: readonly number[],
  counts: readonly number[],
  q: number,
): number | null {
  const total = counts[counts.length - 1] ?? 0;
  if (!(total > 0) || bounds.length === 0) return null;
  const rank = Math.min(Math.max(q, 0), 1) * total;
  for (let i = 0; i < counts.length; i++) {
    const cumulative = counts[i] ?? 0;
    if (cumulative < rank || cumulative === 0) continue;
    if (i >= bounds.length) return bounds[bounds.length - 1]!;
    const upper = bounds[i]!;
    const lower = i === 0 ? 0 : bounds[i - 1]!;
    const below = i === 0 ? 0 : (counts[i - 1] ?? 0);
    const inBucket = cumulative - below;
    if (inBucket <= 0) return upper;
    return lower + ((upper - lower) * (rank - below)) / inBucket;
  }
  return bounds[bounds.length - 1]!;
}

/**
 * `now - base` per bucket; `undefined` when the buckets differ or a counter went backwards (a
 * reset: no delta is meaningful). No base counts everything since the start.
 */
function bucketDelta(now: Buckets | undefined, base: Buckets | undefined): number[] | undefined {
  if (!now) return undefined;
  if (base && base.counts.length !== now.counts.length) return undefined;
  const out: number[] = [];
  for (let i = 0; i < now.counts.length; i++) {
    const d = now.counts[i]! - (base?.counts[i] ?? 0);
    if (d < 0) return undefined;
    out.push(d);
  }
  return out;
}

const round = (value: number | null, digits: number): number | null => {
  if (value === null || !Number.isFinite(value)) return null;
  const f = 10 ** digits;
  return Math.round(value * f) / f;
};

/** Column-oriented series, as the dashboard plots them (`t` in Unix ms, one value per `t`). */
export interface SeriesJson {
  t: number[];
  models: Array<{
    model: string;
    rps: (number | null)[];
    ttftP50Ms: (number | null)[];
    ttftP95Ms: (number | null)[];
    itlP50Ms: (number | null)[];
    itlP95Ms: (number | null)[];
  }>;
}

export class MetricsHistory {
  readonly rateWindowMs: number;
  readonly quantileWindowMs: number;
  readonly maxAgeMs: number;
  private readonly gapMs: number;
  private readonly samples: Ring<Sample>;
  private readonly points: Ring<Point>;

  constructor(options: HistoryOptions = {}) {
    this.rateWindowMs = options.rateWindowMs ?? 5_000;
    this.quantileWindowMs = options.quantileWindowMs ?? 10_000;
    this.maxAgeMs = options.maxAgeMs ?? 300_000;
    this.gapMs = options.gapMs ?? 5_000;
    // One sample per second, over the widest window, and a few spare for timer jitter.
    const windowSamples = Math.ceil(Math.max(this.rateWindowMs, this.quantileWindowMs) / 1000) + 3;
    this.samples = new Ring<Sample>(windowSamples);
    this.points = new Ring<Point>(options.capacity ?? 300);
  }

  get size(): number {
    return this.points.size;
  }

  /** Records a sample and derives its point from the samples before it. */
  push(sample: Sample): Point {
    const previous = this.samples.last();
    if (previous && (sample.t - previous.t > this.gapMs || sample.t < previous.t)) this.samples.clear();
    const rateBase = this.baseFor(sample.t - this.rateWindowMs);
    const quantileBase = this.baseFor(sample.t - this.quantileWindowMs);
    const models = new Map<string, ModelPoint>();
    const names = new Set([...sample.requests.keys(), ...sample.ttft.keys(), ...sample.itl.keys()]);
    for (const model of names) {
      models.set(model, this.modelPoint(model, sample, rateBase, quantileBase));
    }
    const point: Point = { t: sample.t, models, failures: sample.failures };
    this.samples.push(sample);
    this.points.push(point);
    this.points.dropWhile((p) => p.t < sample.t - this.maxAgeMs);
    return point;
  }

  latest(): Point | undefined {
    return this.points.last();
  }

  /** The oldest point still kept (the start of the failure window). */
  oldest(): Point | undefined {
    return this.points.at(0);
  }

  /** The kept points as column-oriented series, every model present over the whole range. */
  series(): SeriesJson {
    const points = this.points.toArray();
    const names = new Set<string>();
    for (const point of points) for (const model of point.models.keys()) names.add(model);
    const models = [...names].sort().map((model) => {
      const column = (pick: (p: ModelPoint) => number | null, digits: number) =>
        points.map((point) => {
          const mp = point.models.get(model);
          return mp ? round(pick(mp), digits) : null;
        });
      return {
        model,
        rps: column((p) => p.rps, 3),
        ttftP50Ms: column((p) => p.ttftP50Ms, 1),
        ttftP95Ms: column((p) => p.ttftP95Ms, 1),
        itlP50Ms: column((p) => p.itlP50Ms, 2),
        itlP95Ms: column((p) => p.itlP95Ms, 2),
      };
    });
    return { t: points.map((p) => p.t), models };
  }

  /** The newest kept sample at least as old as `t` (within half a tick), else the oldest one. */
  private baseFor(t: number): Sample | undefined {
    let base: Sample | undefined;
    for (let i = 0; i < this.samples.size; i++) {
      const s = this.samples.at(i)!;
      if (s.t <= t + 500) base = s;
      else break;
    }
    return base ?? this.samples.at(0);
  }

  private modelPoint(
    model: string,
    sample: Sample,
    rateBase: Sample | undefined,
    quantileBase: Sample | undefined,
  ): ModelPoint {
    let rps: number | null = null;
    if (rateBase && sample.t > rateBase.t) {
      const delta = (sample.requests.get(model) ?? 0) - (rateBase.requests.get(model) ?? 0);
      if (delta >= 0) rps = (delta * 1000) / (sample.t - rateBase.t);
    }
    const quantiles = (
      now: Buckets | undefined,
      base: Buckets | undefined,
    ): [number | null, number | null] => {
      if (!quantileBase || !now) return [null, null];
      const delta = bucketDelta(now, base);
      if (!delta) return [null, null];
      const p50 = histogramQuantile(now.bounds, delta, 0.5);
      const p95 = histogramQuantile(now.bounds, delta, 0.95);
      return [p50 === null ? null : p50 * 1000, p95 === null ? null : p95 * 1000];
    };
    const [ttftP50Ms, ttftP95Ms] = quantiles(sample.ttft.get(model), quantileBase?.ttft.get(model));
    const [itlP50Ms, itlP95Ms] = quantiles(sample.itl.get(model), quantileBase?.itl.get(model));
    return { rps, ttftP50Ms, ttftP95Ms, itlP50Ms, itlP95Ms };
  }
}
