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
  /** No worker serves `model` any more (workers removed, adapters expired, a new `/v1/models`). */
  onModelGone?(model: string): void;
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

  /**
   * The ids of the workers of `model`, in id order (RouteContext.fleet): one array per list of
   * workers, made again only when the model's workers change.
   */
  idsForModel(model: string): readonly string[] {
    const workers = this.forModel(model);
    let ids = this.sortedIds.get(workers);
    if (!ids) {
      ids = workers.map((w) => w.id).sort();
      this.sortedIds.set(workers, ids);
    }
    return ids;
  }

  /** idsForModel's, by the model's worker list (a list is replaced, never changed, when its workers change). */
  private readonly sortedIds = new WeakMap<readonly Worker[], readonly string[]>();

  knowsModel(model: string): boolean {
    return this.byModel.has(model);
  }

  /** Every model some worker serves. */
  models(): string[] {
    return [...this.byModel.keys()];
  }

  setModels(worker: Worker, models: readonly string[]): void {
    worker.models = new Set(models);
    worker.learntAdapters.clear();
    worker.discovered = true;
    this.reindex();
  }

  /**
   * One reading of a worker's engine signals named these adapters (`lora.running`/`waiting`):
   * those its `/v1/models` did not list (loaded since) are served by it from now on, as long as
   * readings go on naming them. At most `signals.maxAdapters` are known so per worker (names past
   * it are ignored, and counted in the result); one that no reading named for
   * `signals.adapterExpiryMs` (`now`: the monotonic clock, performance.now()) is not served by it
   * any more. Costs the names read, and the models changed: nothing else when nothing changed.
   */
  noteAdapters(
    worker: Worker,
    names: Iterable<string>,
    now: number = performance.now(),
  ): { added: number; expired: number; ignored: number } {
    const { maxAdapters, adapterExpiryMs } = this.config.signals;
    const learnt = worker.learntAdapters;
    const fresh: string[] = [];
    for (const name of names) {
      if (learnt.has(name)) learnt.set(name, now);
      else if (name.length > 0 && !worker.models.has(name)) fresh.push(name);
    }
    const expired: string[] = [];
    for (const [name, namedAt] of learnt) if (now - namedAt > adapterExpiryMs) expired.push(name);
    for (const name of expired) learnt.delete(name);
    const added: string[] = [];
    let ignored = 0;
    for (const name of fresh) {
      if (learnt.has(name)) continue;
      if (learnt.size >= maxAdapters) {
        ignored++;
        continue;
      }
      learnt.set(name, now);
      added.push(name);
    }
    if (added.length > 0 || expired.length > 0) {
      const adapters = new Map(worker.adapters);
      const models = new Set(worker.models);
      for (const name of expired) {
        adapters.delete(name);
        models.delete(name);
        worker.forgetModel(name);
        const list = this.byModel.get(name)?.filter((w) => w !== worker) ?? [];
        if (list.length > 0) this.byModel.set(name, list);
        else {
          this.byModel.delete(name);
          this.events.onModelGone?.(name);
        }
      }
      for (const name of added) {
        adapters.set(name, '');
        models.add(name);
        this.byModel.set(name, [...(this.byModel.get(name) ?? []), worker]);
      }
      worker.adapters = adapters;
      worker.models = models;
    }
    return { added: added.length, expired: expired.length, ignored };
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
    const before = this.byModel;
    this.byModel = index;
    for (const model of before.keys()) if (!index.has(model)) this.events.onModelGone?.(model);
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled([...this.workers.values()].map((w) => w.close(false)));
  }
}
