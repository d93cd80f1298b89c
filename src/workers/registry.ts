import type { SluiceConfig, WorkerConfig } from '../config/schema.js';
import { Conflict, NotFound } from '../errors/http-errors.js';
import type { CircuitState } from './circuit-breaker.js';
import { Worker, type WorkerSnapshot, workerIdFromUrl } from './worker.js';

export interface RegistryEvents {
  onAdded?(worker: Worker): void;
  onRemoved?(worker: Worker): void;
  onCircuitChange?(worker: Worker, state: CircuitState): void;
  onHealthChange?(worker: Worker, healthy: boolean): void;
}

/** Every known worker, indexed by id and by model. */
export class WorkerRegistry {
  private readonly workers = new Map<string, Worker>();
  private byModel = new Map<string, Worker[]>();

  constructor(
    private readonly config: SluiceConfig,
    private readonly events: RegistryEvents = {},
  ) {}

  add(workerConfig: WorkerConfig, source: WorkerSnapshot['source']): Worker {
    const id = workerConfig.id ?? workerIdFromUrl(workerConfig.url);
    if (this.workers.has(id))
      throw new Conflict(`A worker with id '${id}' is already registered.`, 'worker_exists');
    const worker = new Worker(
      workerConfig,
      this.config.workerDefaults,
      this.config.breaker,
      source,
      (w, state) => this.events.onCircuitChange?.(w, state),
    );
    this.workers.set(id, worker);
    this.reindex();
    this.events.onAdded?.(worker);
    return worker;
  }

  /** Unregisters a worker: it gets no new requests; those in flight run to their end. */
  remove(id: string): Worker {
    const worker = this.workers.get(id);
    if (!worker) throw new NotFound(`No worker with id '${id}'.`, 'worker_not_found');
    this.workers.delete(id);
    this.reindex();
    this.events.onRemoved?.(worker);
    void worker.close(true);
    return worker;
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
