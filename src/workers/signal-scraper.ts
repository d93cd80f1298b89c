import type { Logger } from 'pino';
import type { SluiceConfig } from '../config/schema.js';
import { loadOf } from '../routing/candidate-view.js';
import {
  newestSeriesOf,
  parseSamples,
  readEngineSignals,
  type Sample,
  wantedMetricNames,
} from './engine-metric-names.js';
import type { MetricNames } from './engine-signals.js';
import { failureCause } from './health-checker.js';
import { KeptTooLarge, keptLines, type NewestSeries } from './kept-lines.js';
import type { WorkerRegistry } from './registry.js';
import type { Worker } from './worker.js';

/** Why a read of a worker's `/metrics` failed: a closed set (the label of the failures metric). */
export const SCRAPE_FAILURES = [
  'timeout',
  'unreachable',
  'http_error',
  'too_large',
  'not_found',
  'not_prometheus',
  'no_known_metrics',
  'invalid_values',
] as const;
export type ScrapeFailure = (typeof SCRAPE_FAILURES)[number];

/**
 * Failures that say the worker has no usable `/metrics`, whatever its load: it falls back to
 * sluice's own counts and is not asked again for `missingRetryMs`. The others (no answer in time,
 * a refused connection, a 5xx) may be load: the reading ages, and past `staleMs` the worker
 * counts as saturated.
 */
const MEANS_MISSING: ReadonlySet<ScrapeFailure> = new Set([
  'not_found',
  'not_prometheus',
  'no_known_metrics',
  'invalid_values',
  'too_large',
]);

/** Answers that say there are no metrics to read here (or not for us). */
const NOT_FOUND_STATUSES: ReadonlySet<number> = new Set([401, 403, 404, 405, 410, 501]);

class ScrapeError extends Error {
  constructor(
    readonly reason: ScrapeFailure,
    message: string,
  ) {
    // It may quote a line of the body: a few hundred characters say enough.
    super(message.length > 300 ? `${message.slice(0, 300)}…` : message);
  }
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Reads every worker's engine metrics on a timer, off the request path: at most one read in flight
 * per worker, each bounded in time (`timeoutMs`) and size (`maxBytes`), parsed into the worker's
 * EngineSignals (engine-metric-names.ts). Routing only ever reads the last result
 * (`Worker.signals()`), so a `/metrics` that hangs, lies or floods costs a connection and a
 * timer, never a request's time.
 */
export class SignalScraper {
  private timer: NodeJS.Timeout | undefined;
  private readonly wanted = new Map<MetricNames, { names: ReadonlySet<string>; newest: NewestSeries }>();

  constructor(
    private readonly registry: WorkerRegistry,
    private readonly options: SluiceConfig['signals'],
    private readonly log: Logger,
    /** Told of each failed read (the failures metric). */
    private readonly onFailure?: (worker: Worker, reason: ScrapeFailure) => void,
  ) {}

  start(): void {
    if (this.timer || !this.options.enabled) return;
    this.timer = setInterval(() => void this.tick(), this.options.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Starts a read of every worker that is due and not being read; resolves when those end. */
  async tick(now = performance.now()): Promise<void> {
    const reads: Promise<void>[] = [];
    for (const worker of this.registry.list()) {
      const state = worker.signalState;
      if (!state.scraped || state.inFlight || now < state.nextAt) continue;
      reads.push(this.scrape(worker));
    }
    await Promise.all(reads);
  }

  /** Reads one worker's metrics now, unless a read of it is in flight (then resolves with that one). */
  scrape(worker: Worker): Promise<void> {
    const state = worker.signalState;
    if (!state.inFlight) {
      state.inFlight = this.read(worker).finally(() => {
        state.inFlight = undefined;
      });
    }
    return state.inFlight;
  }

  private wantedFor(names: Exclude<MetricNames, 'none'>): {
    names: ReadonlySet<string>;
    newest: NewestSeries;
  } {
    let wanted = this.wanted.get(names);
    if (!wanted) {
      wanted = { names: wantedMetricNames(names), newest: newestSeriesOf(names) };
      this.wanted.set(names, wanted);
    }
    return wanted;
  }

  private async read(worker: Worker): Promise<void> {
    const state = worker.signalState;
    const names = state.names;
    if (names === 'none') return;
    state.nextAt = performance.now() + this.options.intervalMs;
    // Requests sent while the scrape is on its way are in the engine's answer or not: the scorer
    // counts what was sent from here (never from when the answer came back), so that none is
    // missed and a burst does not overfill a batch. Its own count (loadOf): what it subtracts is
    // what it adds.
    const loadWhenAsked = loadOf(worker);
    try {
      const samples = await this.fetchSamples(worker, names);
      const parsed = readEngineSignals(samples, names, performance.now());
      if (!parsed.ok) throw new ScrapeError(parsed.reason, `${state.path}: ${parsed.message}`);
      if (state.missing || state.failure) {
        this.log.info(
          { worker: worker.id, source: parsed.signals.source },
          `engine metrics of ${worker.id} are read again`,
        );
      }
      state.last = { ...parsed.signals, loadWhenAsked };
      state.failure = undefined;
      state.missing = undefined;
      if (parsed.refused && !state.namesRefusedLogged) {
        state.namesRefusedLogged = true;
        this.log.warn(
          { worker: worker.id, refused: parsed.refused.names, count: parsed.refused.count },
          `adapter names in ${state.path} of ${worker.id} are not served (too long, not Unicode, or with control characters)`,
        );
      }
      const lora = parsed.signals.lora;
      // Adapters loaded since its `/v1/models` was read (an operator's `models:` list is kept as
      // is); every reading ages those no reading names any more, with or without LoRA.
      if (worker.discovered && !worker.configuredModels) {
        const noted = this.registry.noteAdapters(worker, lora ? [...lora.running, ...lora.waiting] : []);
        if (noted.ignored > 0 && !state.adaptersCappedLogged) {
          state.adaptersCappedLogged = true;
          this.log.warn(
            { worker: worker.id, ignored: noted.ignored, max: this.options.maxAdapters },
            `${state.path} of ${worker.id} names more adapters than signals.maxAdapters (${this.options.maxAdapters}): the rest are not served until some expire`,
          );
        }
      }
    } catch (err) {
      const failure =
        err instanceof ScrapeError
          ? err
          : new ScrapeError(
              isTimeout(err) ? 'timeout' : 'unreachable',
              `${state.path}: ${failureCause(err, this.options.timeoutMs)}`,
            );
      this.onFailure?.(worker, failure.reason);
      this.failed(worker, failure);
    }
  }

  private failed(worker: Worker, failure: ScrapeError): void {
    const state = worker.signalState;
    if (MEANS_MISSING.has(failure.reason) || state.missing) {
      const until = performance.now() + this.options.missingRetryMs;
      if (!state.missing) {
        this.log.warn(
          {
            worker: worker.id,
            reason: failure.reason,
            cause: failure.message,
            retryMs: this.options.missingRetryMs,
          },
          `no usable engine metrics on ${worker.id} (${failure.message}): routing on sluice's own counts`,
        );
      }
      // A worker already without metrics that also fails to answer keeps the reason it had.
      const reason = MEANS_MISSING.has(failure.reason)
        ? failure.message
        : (state.missing?.reason ?? failure.message);
      state.missing = { reason, until };
      state.last = undefined;
      state.failure = undefined;
      state.nextAt = until;
      return;
    }
    if (state.failure === undefined) {
      this.log.warn(
        { worker: worker.id, reason: failure.reason, cause: failure.message },
        `engine metrics of ${worker.id} not read (${failure.message}): past signals.staleMs it counts as saturated`,
      );
    }
    state.failure = failure.message;
  }

  private async fetchSamples(
    worker: Worker,
    names: Exclude<MetricNames, 'none'>,
  ): Promise<Map<string, Sample[]>> {
    const { timeoutMs, maxBytes, maxSampleBytes } = this.options;
    const path = worker.signalState.path;
    const headers: Record<string, string> = { accept: 'text/plain;version=0.0.4;q=1, */*;q=0.1' };
    if (worker.apiKey) headers.authorization = `Bearer ${worker.apiKey}`;
    const response = await worker.pool.request({
      method: 'GET',
      path: worker.basePath + path,
      headers,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: AbortSignal.timeout(timeoutMs),
    });
    const { statusCode: status, body } = response;
    try {
      if (status < 200 || status >= 300) {
        // A short error page is read out so that the connection is kept; a long one is cut.
        await body.dump({ limit: 64 * 1024 }).catch(() => {});
        if (NOT_FOUND_STATUSES.has(status))
          throw new ScrapeError('not_found', `${path} answered HTTP ${status}`);
        throw new ScrapeError('http_error', `${path} answered HTTP ${status}`);
      }
      const type = headerValue(response.headers['content-type']);
      if (type !== undefined && !/^\s*(text\/plain|application\/openmetrics-text)\b/i.test(type))
        throw new ScrapeError('not_prometheus', `${path} answered ${type}, not Prometheus text`);
      const length = Number(headerValue(response.headers['content-length']));
      if (length > maxBytes)
        throw new ScrapeError('too_large', `${path} is ${length} bytes, more than ${maxBytes}`);
      const wanted = this.wantedFor(names);
      const text = await keptLines(
        body,
        wanted.names,
        wanted.newest,
        { maxBytes, maxSampleBytes },
        path,
      ).catch((err: unknown) => {
        throw err instanceof KeptTooLarge ? new ScrapeError('too_large', err.message) : err;
      });
      try {
        return parseSamples(text);
      } catch (err) {
        throw new ScrapeError('not_prometheus', `${path} is not Prometheus text: ${(err as Error).message}`);
      }
    } finally {
      if (!body.readableEnded) {
        // Cut: undici reports the cut as an error of the body, which nobody reads any more.
        body.on('error', () => {});
        body.destroy();
      }
    }
  }
}

function isTimeout(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  const name = (err as { name?: unknown }).name;
  return (
    code === 'UND_ERR_HEADERS_TIMEOUT' ||
    code === 'UND_ERR_BODY_TIMEOUT' ||
    code === 'UND_ERR_CONNECT_TIMEOUT' ||
    name === 'TimeoutError' ||
    name === 'AbortError'
  );
}
