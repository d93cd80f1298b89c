import type { SluiceConfig, WorkerConfig } from '../config/schema.js';
import { WorkerExists } from '../errors/conflict-errors.js';
import { WorkerNotFound } from '../errors/not-found-errors.js';
import type { CircuitState } from './circuit-breaker.js';
import { Worker, type WorkerSnapshot, workerIdFromUrl } from './worker.js';

export interface RegistryEvents {
  onAdded?(worker: Worker): void;
  onRemoved?(worker: Worker): void;
  /** `model` undefined: the worker's own circuit; else its circuit for that model. */
  onCircuitChange?(worker: Worker, state: CircuitState, model: string | undefined): void;
  /** A worker's circuit for `model` stayed closed: the model's ejection cap is reached. */
  onEjectionRefused?(worker: Worker, model: string): void;
  onHealthChange?(worker: Worker, healthy: boolean): void;
}

/** Every known worker, indexed by id and by model. */
export class WorkerRegistry {
  private readonly workers = new Map<string, Worker>();
  private byModel = new Map<string, Worker[]>();
  /** The opaque public id of each registered worker URL without a configured id. */
  private readonly publicIds = new Map<string, string>();
  private readonly prefillListeners = new Set<() => void>();
  private publicIdCount = 0;

  constructor(
    private readonly config: SluiceConfig,
    private readonly events: RegistryEvents = {},
  ) {}

  add(workerConfig: WorkerConfig, source: WorkerSnapshot['source']): Worker {
    const id = workerConfig.id ?? workerIdFromUrl(workerConfig.url);
    if (this.workers.has(id)) throw new WorkerExists(id);
    const worker = new Worker(
      workerConfig,
      this.config.workerDefaults,
      this.config.breaker,
      source,
      (w, state, model) => this.events.onCircuitChange?.(w, state, model),
      workerConfig.id ?? this.publicIdFor(workerConfig.url),
      (model, w) => ({
        canOpen: () => this.mayEject(model, w),
        onOpenRefused: () => this.events.onEjectionRefused?.(w, model),
      }),
      this.config.server.exposeWorker,
      this.config.signals,
    );
    worker.onPrefillStart = () => {
      for (const listener of this.prefillListeners) listener();
    };
    this.workers.set(id, worker);
    this.reindex();
    this.events.onAdded?.(worker);
    return worker;
  }

  /** Unregisters a worker: it gets no new requests; those in flight run to their end. */
  remove(id: string): Worker {
    const worker = this.workers.get(id);
    if (!worker) throw new WorkerNotFound(id);
    this.workers.delete(id);
    this.publicIds.delete(worker.url);
    this.reindex();
    this.events.onRemoved?.(worker);
    void worker.close(true);
    return worker;
  }

  private publicIdFor(url: string): string {
    const key = url.replace(/\/$/, '');
    let id = this.publicIds.get(key);
    if (!id) {
      id = `worker-${++this.publicIdCount}`;
      this.publicIds.set(key, id);
    }
    return id;
  }

  /**
   * Whether `worker` may be ejected for `model` now: at most `breaker.maxEjectionPercent` of the
   * model's workers are ejected at once (at least one may be, as in Envoy's outlier detection).
   */
  mayEject(model: string, worker: Worker): boolean {
    const workers = this.forModel(model);
    const cap = Math.max(1, Math.floor((workers.length * this.config.breaker.maxEjectionPercent) / 100));
    let ejected = 0;
    for (const w of workers) if (w !== worker && w.ejectedFor(model)) ejected++;
    return ejected + 1 <= cap;
  }

  /**
   * Calls `listener` whenever a prompt becomes pending prefill on a worker that had none
   * (Worker.addPendingPrefill); the returned function stops it.
   */
  onPrefillStart(listener: () => void): () => void {
    this.prefillListeners.add(listener);
    return () => this.prefillListeners.delete(listener);
  }

  get(id: string): Worker | undefined {
    return this.workers.get(id);
  }

  list(): Worker[] {
    return [...this.workers.values()];
  }

  get size(): number {
    return this.workers.size;
  }

  /** Workers that serve `model`, healthy or not. */
  forModel(model: string): readonly Worker[] {
    return this.byModel.get(model) ?? [];
  }

  knowsModel(model: string): boolean {
    return this.byModel.has(model);
  }

  /** Every model some worker serves. */
  models(): string[] {
    return [...this.byModel.keys()];
  }

  setModels(worker: Worker, models: readonly string[]): void {
    worker.models = new Set(models);
    worker.discovered = true;
    this.reindex();
  }

  /**
   * Registers adapters its engine reports using (`lora.running`/`waiting` of its signals) that
   * its `/v1/models` did not list (loaded since): requests for them may go to it from now on.
   */
  noteAdapters(worker: Worker, names: Iterable<string>): void {
    let added: Map<string, string> | undefined;
    for (const name of names) {
      if (name.length === 0 || worker.models.has(name)) continue;
      added ??= new Map(worker.adapters);
      added.set(name, '');
    }
    if (!added) return;
    worker.adapters = added;
    worker.models = new Set([...worker.models, ...added.keys()]);
    this.reindex();
  }

  setHealthy(worker: Worker, healthy: boolean): void {
    if (worker.healthy === healthy) return;
    worker.healthy = healthy;
    this.events.onHealthChange?.(worker, healthy);
  }

  private reindex(): void {
    const index = new Map<string, Worker[]>();
    for (const worker of this.workers.values()) {
      for (const model of worker.models) {
        const list = index.get(model) ?? [];
        list.push(worker);
        index.set(model, list);
      }
    }
    this.byModel = index;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled([...this.workers.values()].map((w) => w.close(false)));
  }
}
