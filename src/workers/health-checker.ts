import type { SluiceConfig } from '../config/schema.js';
import { ControlClosed } from '../errors/stream-errors.js';
import type { Logger } from '../observability/logger.js';
import { discoverModels } from './discovery.js';
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
      if (status < 200 || status >= 300) failure = `health check answered HTTP ${status}`;
      else if (!worker.discovered) {
        const models = worker.configuredModels ?? (await discoverModels(worker, this.options.timeoutMs));
        this.registry.setModels(worker, models);
      }
    } catch (err) {
      failure = (err as Error).message;
    }
    this.record(
      worker,
      failure === undefined ? null : new ControlClosed(`Health check of ${worker.id} failed: ${failure}`),
    );
    return failure === undefined;
  }

  /** A request failure that says the worker's control channel is gone (connection refused). */
  reportUnreachable(worker: Worker, message: string): void {
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
    }
  }

  private mark(worker: Worker, healthy: boolean, error: ControlClosed | null): void {
    const was = worker.healthy;
    worker.lastError = error ? { code: error.code, message: error.message } : null;
    this.registry.setHealthy(worker, healthy);
    if (was !== healthy) {
      if (healthy) this.log.info({ worker: worker.id, models: [...worker.models] }, 'worker healthy');
      else this.log.warn({ worker: worker.id, code: error?.code, error: error?.message }, 'worker unhealthy');
    }
  }
}
