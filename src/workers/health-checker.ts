import type { Logger } from 'pino';
import type { SluiceConfig } from '../config/schema.js';
import { ControlClosed } from '../errors/stream-errors.js';
import { discoverModels, MAX_LISTED_MODELS } from './discovery.js';
import type { WorkerRegistry } from './registry.js';
import { callWorker } from './upstream-call.js';
import type { Worker } from './worker.js';

/**
 * Checks every worker periodically: `GET <healthPath>` must answer 2xx within the timeout.
 * `failureThreshold` failures in a row mark a worker unhealthy (its control channel is gone),
 * `successThreshold` successes mark it healthy again. A worker whose models are not known yet
 * is asked for them once it answers.
 */
export class HealthChecker {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly registry: WorkerRegistry,
    private readonly options: SluiceConfig['health'],
    private readonly log: Logger,
  ) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.checkAll(), this.options.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Runs one round over every worker; concurrent calls share the round in progress. */
  checkAll(): Promise<void> {
    if (!this.running) {
      this.running = Promise.allSettled(this.registry.list().map((w) => this.check(w))).then(() => {
        this.running = undefined;
      });
    }
    return this.running;
  }

  async check(worker: Worker): Promise<boolean> {
    let failure: string | undefined;
    try {
      const { status } = await callWorker(worker, 'GET', worker.healthPath, this.options.timeoutMs);
      if (status < 200 || status >= 300) failure = `answered HTTP ${status}`;
      else if (!worker.discovered) {
        if (worker.configuredModels) this.registry.setModels(worker, worker.configuredModels);
        else {
          const found = await discoverModels(worker, this.options.timeoutMs);
          if (found.refused.count > 0) {
            this.log.warn(
              { worker: worker.id, refused: found.refused.names, count: found.refused.count },
              `${found.refused.count} model names on /v1/models of ${worker.id} are not served (too long, not Unicode, or with control characters)`,
            );
          }
          if (found.ignored > 0) {
            this.log.warn(
              { worker: worker.id, ignored: found.ignored, max: MAX_LISTED_MODELS },
              `/v1/models of ${worker.id} lists more than ${MAX_LISTED_MODELS} models: ${found.ignored} ignored`,
            );
          }
          worker.maxModelLen = found.maxModelLen;
          worker.adapters = found.adapters;
          worker.modelKinds = found.kinds;
          this.registry.setModels(worker, found.ids);
        }
      }
    } catch (err) {
      failure = failureCause(err, this.options.timeoutMs);
    }
    worker.downCause = failure ?? null;
    this.record(
      worker,
      failure === undefined ? null : new ControlClosed(`Health check of ${worker.id} failed: ${failure}`),
    );
    return failure === undefined;
  }

  /** A request failure that says the worker's control channel is gone (connection refused). */
  reportUnreachable(worker: Worker, message: string): void {
    worker.downCause = 'connection refused';
    worker.consecutiveHealthSuccesses = 0;
    worker.consecutiveHealthFailures = this.options.failureThreshold;
    this.mark(worker, false, new ControlClosed(message));
  }

  private record(worker: Worker, error: ControlClosed | null): void {
    if (!error) {
      worker.consecutiveHealthFailures = 0;
      worker.consecutiveHealthSuccesses++;
      if (!worker.healthy && worker.consecutiveHealthSuccesses >= this.options.successThreshold) {
        this.mark(worker, true, null);
      }
    } else {
      worker.consecutiveHealthSuccesses = 0;
      worker.consecutiveHealthFailures++;
      worker.lastError = { code: error.code, message: error.message };
      // A worker that never answered is unhealthy from its first failure.
      const threshold = worker.healthy ? this.options.failureThreshold : 1;
      if (worker.consecutiveHealthFailures >= threshold) this.mark(worker, false, error);
      // A worker down from the start never changes state: say so once, with the cause.
      if (!worker.healthy && !worker.downLogged) {
        worker.downLogged = true;
        this.log.warn(
          { worker: worker.id, workerUrl: worker.url, cause: worker.downCause, models: [...worker.models] },
          `worker ${worker.id} is down: ${worker.downCause}`,
        );
      }
    }
  }

  private mark(worker: Worker, healthy: boolean, error: ControlClosed | null): void {
    const was = worker.healthy;
    worker.lastError = error ? { code: error.code, message: error.message } : null;
    this.registry.setHealthy(worker, healthy);
    if (was !== healthy) {
      if (healthy) {
        if (worker.downLogged) this.log.info({ worker: worker.id }, `worker ${worker.id} is back`);
        worker.downLogged = false;
        this.log.info({ worker: worker.id, models: [...worker.models] }, 'worker healthy');
      } else {
        worker.downLogged = true;
        this.log.warn(
          { worker: worker.id, code: error?.code, cause: worker.downCause, error: error?.message },
          'worker unhealthy',
        );
      }
    }
  }
}

/** What went wrong with a health check, in a few words an operator reads at once. */
export function failureCause(err: unknown, timeoutMs: number): string {
  const direct = (err as { code?: unknown }).code;
  const nested = (err as { cause?: { code?: unknown } }).cause?.code;
  const code = typeof direct === 'string' ? direct : typeof nested === 'string' ? nested : undefined;
  const name = (err as { name?: unknown }).name;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'host not found';
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET' || code === 'EPIPE') return 'connection reset';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') return 'host unreachable';
  if (
    code === 'UND_ERR_HEADERS_TIMEOUT' ||
    code === 'UND_ERR_BODY_TIMEOUT' ||
    code === 'UND_ERR_CONNECT_TIMEOUT' ||
    name === 'TimeoutError' ||
    name === 'AbortError'
  ) {
    return `no answer within ${timeoutMs} ms`;
  }
  return err instanceof Error ? err.message : String(err);
}
