import { Pool } from 'undici';
import type { WorkerConfig, WorkerLimits } from '../config/schema.js';
import { InvalidDataParallelRank } from '../errors/stream-errors.js';
import { CircuitBreaker, type CircuitBreakerOptions, type CircuitState } from './circuit-breaker.js';
import { ConcurrencyLimiter } from './concurrency-limiter.js';

export interface WorkerSnapshot {
  id: string;
  url: string;
  models: string[];
  healthy: boolean;
  circuit: CircuitState;
  inflight: number;
  queued: number;
  maxConcurrent: number;
  dpSize: number;
  rankInflight: number[];
  source: 'static' | 'admin' | 'discovery';
  lastError: { code: string; message: string } | null;
}

export function workerIdFromUrl(url: string): string {
  const parsed = new URL(url);
  return parsed.host + (parsed.pathname === '/' ? '' : parsed.pathname.replace(/\/$/, ''));
}

/**
 * One OpenAI-compatible engine endpoint: its connection pool, the models it serves, its health,
 * circuit breaker, concurrency limit, and in-flight count per data-parallel rank.
 */
export class Worker {
  readonly id: string;
  readonly url: string;
  /** Path prefix of the worker URL (`http://host/prefix`), prepended to every request path. */
  readonly basePath: string;
  readonly pool: Pool;
  readonly breaker: CircuitBreaker;
  readonly limiter: ConcurrencyLimiter;
  readonly dpSize: number;
  readonly apiKey: string | undefined;
  readonly healthPath: string;
  readonly configuredModels: readonly string[] | undefined;
  models: ReadonlySet<string>;
  healthy = false;
  /** Set when the worker answered its model list at least once. */
  discovered = false;
  lastError: { code: string; message: string } | null = null;
  /** Why the last health check failed, in a few words (`connection refused`, `answered HTTP 503`). */
  downCause: string | null = null;
  /** The operator has been told this worker is down (logged once until it comes back). */
  downLogged = false;
  consecutiveHealthFailures = 0;
  consecutiveHealthSuccesses = 0;
  private readonly rankInflight: number[];

  constructor(
    config: WorkerConfig,
    limits: WorkerLimits,
    breaker: CircuitBreakerOptions,
    readonly source: WorkerSnapshot['source'],
    onCircuitChange?: (worker: Worker, state: CircuitState) => void,
  ) {
    const parsed = new URL(config.url);
    this.url = config.url.replace(/\/$/, '');
    this.id = config.id ?? workerIdFromUrl(config.url);
    this.basePath = parsed.pathname === '/' ? '' : parsed.pathname.replace(/\/$/, '');
    this.configuredModels = config.models;
    this.models = new Set(config.models ?? []);
    this.dpSize = config.dpSize ?? 1;
    this.apiKey = config.apiKey;
    this.healthPath = config.healthPath ?? '/health';
    this.rankInflight = new Array<number>(this.dpSize).fill(0);
    const maxConcurrent = config.maxConcurrent ?? limits.maxConcurrent;
    this.limiter = new ConcurrencyLimiter(
      this.id,
      maxConcurrent,
      config.queueSize ?? limits.queueSize,
      config.queueTimeoutMs ?? limits.queueTimeoutMs,
    );
    this.breaker = new CircuitBreaker(breaker, (state) => onCircuitChange?.(this, state));
    this.pool = new Pool(parsed.origin, {
      // One connection per concurrent request, plus a few for health checks and utility calls.
      connections: maxConcurrent + 4,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      // The dispatcher enforces idle and deadline timeouts per stream itself.
      bodyTimeout: 0,
      connect: { timeout: 5_000 },
    });
  }

  /** Requests in flight plus waiting, the load that routing policies compare. */
  get load(): number {
    return this.limiter.inFlight + this.limiter.queued;
  }

  serves(model: string): boolean {
    return this.models.has(model);
  }

  /** Picks the data-parallel rank for a request: the one asked for (validated) or the least busy. */
  chooseRank(requested: number | undefined): number {
    if (requested !== undefined) {
      if (!Number.isInteger(requested) || requested < 0 || requested >= this.dpSize) {
        throw new InvalidDataParallelRank(requested, this.connectedRanks());
      }
      return requested;
    }
    let best = 0;
    for (let rank = 1; rank < this.dpSize; rank++) {
      if (this.rankInflight[rank]! < this.rankInflight[best]!) best = rank;
    }
    return best;
  }

  connectedRanks(): number[] {
    return Array.from({ length: this.dpSize }, (_, i) => i);
  }

  rankStarted(rank: number): void {
    this.rankInflight[rank]!++;
  }
  rankEnded(rank: number): void {
    this.rankInflight[rank]!--;
  }

  snapshot(): WorkerSnapshot {
    return {
      id: this.id,
      url: this.url,
      models: [...this.models],
      healthy: this.healthy,
      circuit: this.breaker.current,
      inflight: this.limiter.inFlight,
      queued: this.limiter.queued,
      maxConcurrent: this.limiter.maxConcurrent,
      dpSize: this.dpSize,
      rankInflight: [...this.rankInflight],
      source: this.source,
      lastError: this.lastError,
    };
  }

  /** Closes the connection pool: `graceful` lets requests in flight finish, else they are cut. */
  async close(graceful: boolean): Promise<void> {
    try {
      if (graceful) await this.pool.close();
      else await this.pool.destroy();
    } catch {
      // already closed
    }
  }
}
