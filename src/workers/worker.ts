import { Pool } from 'undici';
import type { ModelKind } from '../config/model-kind.js';
import type { WorkerConfig, WorkerLimits } from '../config/schema.js';
import { InvalidDataParallelRank } from '../errors/request-content-errors.js';
import { CircuitBreaker, type CircuitBreakerOptions, type CircuitState } from './circuit-breaker.js';
import { ConcurrencyLimiter } from './concurrency-limiter.js';
import { type SignalsReading, type SignalsSnapshot, signalsSnapshot } from './engine-signals.js';
import { type SignalOptions, WorkerSignals } from './worker-signals.js';

export interface WorkerSnapshot {
  id: string;
  /** The name API clients may see (`X-Sluice-Worker`): the configured id, else `worker-<n>`. */
  publicId: string;
  url: string;
  models: string[];
  healthy: boolean;
  /** The worst of its own circuit and its per-model circuits. */
  circuit: CircuitState;
  /** Its own circuit (connection-level failures). */
  workerCircuit: CircuitState;
  /** Its per-model circuits (failures of one model's requests), by model. */
  modelCircuits: Record<string, CircuitState>;
  inflight: number;
  queued: number;
  /** Characters of prompts sent here that have had no first token yet (the scorer's pending prefill). */
  pendingPrefill: number;
  /** The other gateway replicas' requests and pending prefill on it (shared through Redis). */
  elsewhere: PeerLoad;
  maxConcurrent: number;
  dpSize: number;
  rankInflight: number[];
  source: 'static' | 'admin' | 'discovery';
  lastError: { code: string; message: string } | null;
  /** What its engine reports of its load (`/metrics`), or sluice's own counts: see engine-signals.ts. */
  signals: SignalsSnapshot;
  /** Its LoRA adapters, to their base model ('' when only its signals named it). */
  adapters: Record<string, string>;
}

/** A worker's load on the other gateway replicas (routing's Candidate.elsewhere). */
export interface PeerLoad {
  readonly load: number;
  readonly pendingPrefill: number;
}

export const NO_PEER_LOAD: PeerLoad = Object.freeze({ load: 0, pendingPrefill: 0 });

export function workerIdFromUrl(url: string): string {
  const parsed = new URL(url);
  return parsed.host + (parsed.pathname === '/' ? '' : parsed.pathname.replace(/\/$/, ''));
}

const CIRCUIT_RANK: Record<CircuitState, number> = { closed: 0, half_open: 1, open: 2 };

/** How a worker's circuits report their changes (`model` undefined: the worker's own circuit). */
export type CircuitChange = (worker: Worker, state: CircuitState, model: string | undefined) => void;

/**
 * One OpenAI-compatible engine endpoint: its connection pool, the models it serves, its health,
 * circuit breaker, concurrency limit, and in-flight count per data-parallel rank.
 */
export class Worker {
  readonly id: string;
  /** What API clients may be shown instead of `id` (which may be host:port). */
  readonly publicId: string;
  /** The worker's name as API clients see it: `publicId`, or undefined when it is hidden (`server.exposeWorker`). */
  readonly clientName: string | undefined;
  readonly url: string;
  /** Path prefix of the worker URL (`http://host/prefix`), prepended to every request path. */
  readonly basePath: string;
  readonly pool: Pool;
  readonly breaker: CircuitBreaker;
  readonly limiter: ConcurrencyLimiter;
  readonly dpSize: number;
  /** Its engine's batch as configured (`maxBatch`; Candidate.maxBatch). */
  readonly maxBatch: number | undefined;
  readonly apiKey: string | undefined;
  /** Its engine orders waiting requests by their `priority` field (config `schedulingPolicy: priority`). */
  readonly priorityScheduling: boolean;
  readonly healthPath: string;
  readonly configuredModels: readonly string[] | undefined;
  models: ReadonlySet<string>;
  healthy = false;
  /** Set when the worker answered its model list at least once. */
  discovered = false;
  /** The context length of its models, as its `/v1/models` reports them (discovered workers only). */
  maxModelLen: ReadonlyMap<string, number> = new Map();
  /**
   * Its LoRA adapters, to their base model: listed on its `/v1/models` (`parent`), or seen in its
   * engine's signals (`lora.running`/`waiting`; base model unknown: ''). Each is among `models`.
   */
  adapters: ReadonlyMap<string, string> = new Map();
  /**
   * The adapters among `adapters` known only from its signals, to when a reading last named them
   * (performance.now()): bounded and expired by WorkerRegistry.noteAdapters.
   */
  readonly learntAdapters = new Map<string, number>();
  /** What its models serve, for those its `/v1/models` declares it of (discovered workers only). */
  modelKinds: ReadonlyMap<string, readonly ModelKind[]> = new Map();
  lastError: { code: string; message: string } | null = null;
  /** Why the last health check failed, in a few words (`connection refused`, `answered HTTP 503`). */
  downCause: string | null = null;
  /** The operator has been told this worker is down (logged once until it comes back). */
  downLogged = false;
  consecutiveHealthFailures = 0;
  consecutiveHealthSuccesses = 0;
  /** What the signal scraper learned of its `/metrics` (src/workers/signal-scraper.ts). */
  readonly signalState: WorkerSignals;
  private readonly rankInflight: number[];
  /** What in a message names the worker internally: its URL, host, id. */
  private readonly internalNames: readonly string[];
  /** One circuit per model this worker was asked for (bounded: only models the registry knows). */
  private readonly modelBreakers = new Map<string, CircuitBreaker>();

  constructor(
    config: WorkerConfig,
    limits: WorkerLimits,
    private readonly breakerOptions: CircuitBreakerOptions,
    readonly source: WorkerSnapshot['source'],
    private readonly onCircuitChange?: CircuitChange,
    publicId?: string,
    /** Per-model circuit options (the ejection cap), given the model. */
    private readonly modelBreakerOptions?: (model: string, worker: Worker) => Partial<CircuitBreakerOptions>,
    exposed = true,
    signalOptions: SignalOptions = { enabled: false, staleMs: 3_000 },
  ) {
    const parsed = new URL(config.url);
    this.url = config.url.replace(/\/$/, '');
    this.id = config.id ?? workerIdFromUrl(config.url);
    this.publicId = publicId ?? this.id;
    this.clientName = exposed ? this.publicId : undefined;
    // Longest first, so that a URL is replaced before the host inside it.
    this.internalNames = [...new Set([this.url, config.url, this.id, parsed.host, parsed.hostname])]
      .filter((name) => name.length > 0 && name !== this.clientName)
      .sort((a, b) => b.length - a.length);
    this.basePath = parsed.pathname === '/' ? '' : parsed.pathname.replace(/\/$/, '');
    this.configuredModels = config.models;
    this.models = new Set(config.models ?? []);
    this.dpSize = config.dpSize ?? 1;
    this.maxBatch = config.maxBatch;
    this.apiKey = config.apiKey;
    this.priorityScheduling = config.schedulingPolicy === 'priority';
    this.healthPath = config.healthPath ?? '/health';
    this.signalState = new WorkerSignals(
      config.metrics?.names ?? 'auto',
      config.metrics?.path ?? '/metrics',
      signalOptions,
    );
    this.rankInflight = new Array<number>(this.dpSize).fill(0);
    const maxConcurrent = config.maxConcurrent ?? limits.maxConcurrent;
    this.limiter = new ConcurrencyLimiter(
      this.id,
      maxConcurrent,
      config.queueSize ?? limits.queueSize,
      config.queueTimeoutMs ?? limits.queueTimeoutMs,
    );
    this.breaker = new CircuitBreaker(breakerOptions, (state) => onCircuitChange?.(this, state, undefined));
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

  /** Characters of prompts sent here that have had no first token yet (see Candidate.pendingPrefill). */
  pendingPrefill = 0;

  /** Called when a prompt becomes pending prefill here while none was (set by the WorkerRegistry). */
  onPrefillStart: (() => void) | undefined;

  /**
   * Counts `chars` more of a prompt as pending prefill here (a negative count: its first token
   * came). A worker that had none tells `onPrefillStart`: the other replicas are told at once
   * (load sharing), since a heavy tenant's prompt and a small one's must not both go to a worker
   * each replica thinks clear.
   */
  addPendingPrefill(chars: number): void {
    const was = this.pendingPrefill;
    this.pendingPrefill += chars;
    if (was === 0 && chars > 0) this.onPrefillStart?.();
  }

  /** What the other gateway replicas have on it (see Candidate.elsewhere); set by src/replicas/load-share.ts. */
  elsewhere: PeerLoad = NO_PEER_LOAD;

  /** Requests in flight plus waiting, the load that routing policies compare. */
  get load(): number {
    return this.limiter.inFlight + this.limiter.queued;
  }

  /**
   * What the engine reports of its load now (see engine-signals.ts): `fresh`, `stale` (count it
   * as saturated) or `missing` (sluice's own counts, `source: 'none'`).
   */
  signals(now = performance.now()): SignalsReading {
    return this.signalState.reading(
      () => ({ waiting: this.limiter.queued, running: this.limiter.inFlight }),
      now,
    );
  }

  serves(model: string): boolean {
    return this.models.has(model);
  }

  /**
   * A message fit for API clients: the worker's internal names (URL, host:port, id) become its
   * public id, or are cut out when workers are hidden from clients.
   */
  redact(message: string): string {
    let out = message;
    for (const name of this.internalNames) {
      if (!out.includes(name)) continue;
      // Whole names only: `vllm` is not cut out of `vllm-engine`, nor 10.0.0.5 out of 10.0.0.50.
      const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      const whole = `(?<![A-Za-z0-9_.-])${escaped}(?![A-Za-z0-9_-])`;
      if (this.clientName !== undefined) {
        out = out.replace(new RegExp(whole, 'g'), this.clientName);
        continue;
      }
      out = out
        .replace(new RegExp(`\\b(W|w)orker ${whole}`, 'g'), (_m, w: string) =>
          w === 'W' ? 'The worker' : 'the worker',
        )
        .replace(new RegExp(`\\s*${whole}`, 'g'), '');
    }
    return out;
  }

  /** Rewrites an error's message for API clients (see `redact`); returns the error. */
  redactError<E extends Error>(err: E): E {
    const message = this.redact(err.message);
    if (message !== err.message) err.message = message;
    return err;
  }

  /** The circuit of this worker for one model's requests. */
  modelBreaker(model: string): CircuitBreaker {
    let breaker = this.modelBreakers.get(model);
    if (!breaker) {
      breaker = new CircuitBreaker(
        { ...this.breakerOptions, ...this.modelBreakerOptions?.(model, this) },
        (state) => this.onCircuitChange?.(this, state, model),
      );
      this.modelBreakers.set(model, breaker);
    }
    return breaker;
  }

  /** Drops what it holds for a model it no longer serves (its circuit for it). */
  forgetModel(model: string): void {
    this.modelBreakers.delete(model);
  }

  /** Whether both its own circuit and the model's would admit a request now. */
  admits(model: string): boolean {
    return this.breaker.canAdmit() && (this.modelBreakers.get(model)?.canAdmit() ?? true);
  }

  /** Ejected for `model`: its own circuit or the model's is not closed. */
  ejectedFor(model: string): boolean {
    return (
      this.breaker.current !== 'closed' || (this.modelBreakers.get(model)?.current ?? 'closed') !== 'closed'
    );
  }

  /** Per-model circuit states, by model. */
  modelCircuits(): Record<string, CircuitState> {
    const out: Record<string, CircuitState> = {};
    for (const [model, breaker] of this.modelBreakers) out[model] = breaker.current;
    return out;
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
    const workerCircuit = this.breaker.current;
    const modelCircuits = this.modelCircuits();
    let circuit = workerCircuit;
    for (const state of Object.values(modelCircuits)) {
      if (CIRCUIT_RANK[state] > CIRCUIT_RANK[circuit]) circuit = state;
    }
    return {
      id: this.id,
      publicId: this.publicId,
      url: this.url,
      models: [...this.models],
      healthy: this.healthy,
      circuit,
      workerCircuit,
      modelCircuits,
      inflight: this.limiter.inFlight,
      queued: this.limiter.queued,
      pendingPrefill: this.pendingPrefill,
      elsewhere: this.elsewhere,
      maxConcurrent: this.limiter.maxConcurrent,
      dpSize: this.dpSize,
      rankInflight: [...this.rankInflight],
      source: this.source,
      lastError: this.lastError,
      signals: signalsSnapshot(this.signals()),
      adapters: Object.fromEntries(this.adapters),
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
