import { type DiscoveredWorker, evaluatePod, type Pod, type PodWorkerOptions, podId } from './pod.js';
import type { DiscoveryHandlers, DiscoveryLogger } from './types.js';

/**
 * The workers that discovery has delivered to its handlers, kept in step with the pods: each
 * change of a pod's verdict becomes `onRemove` and/or `onAdd`, and a misconfigured pod is
 * warned about once per distinct problem.
 */
export class WorkerSet {
  handlers: DiscoveryHandlers | undefined;
  /** Workers delivered to the handlers and not removed since, by id. */
  private readonly known = new Map<string, DiscoveredWorker>();
  /** The last problem warned about for a pod, so that each is logged once. */
  private readonly problems = new Map<string, string>();

  constructor(
    private readonly options: PodWorkerOptions,
    private readonly log: DiscoveryLogger,
  ) {}

  get size(): number {
    return this.known.size;
  }

  /** Copies of the workers known now. */
  list(): DiscoveredWorker[] {
    return [...this.known.values()].map((w) => ({ ...w }));
  }

  /** Takes a LIST's pods as the whole truth; delivers the differences, removals first. */
  replace(pods: Pod[]): void {
    const next = new Map<string, DiscoveredWorker>();
    const present = new Set<string>();
    for (const pod of pods) {
      const id = podId(pod, this.options.namespace);
      present.add(id);
      const worker = this.verdict(id, pod);
      if (worker) next.set(id, worker);
    }
    for (const id of this.problems.keys()) if (!present.has(id)) this.problems.delete(id);
    for (const [id, worker] of this.known) {
      if (next.get(id)?.url !== worker.url) this.remove(id);
    }
    for (const worker of next.values()) {
      if (!this.known.has(worker.id)) this.add(worker);
    }
  }

  /** Applies one watched pod (ADDED, MODIFIED, or DELETED when `deleted`). */
  apply(pod: Pod, deleted: boolean): void {
    const id = podId(pod, this.options.namespace);
    let worker: DiscoveredWorker | undefined;
    if (deleted) this.problems.delete(id);
    else worker = this.verdict(id, pod);
    const known = this.known.get(id);
    if (known && worker && known.url === worker.url) return;
    if (known) this.remove(id);
    if (worker) this.add(worker);
  }

  /** The worker a pod is, if any; warns once about each misconfiguration. */
  private verdict(id: string, pod: Pod): DiscoveredWorker | undefined {
    const { worker, problem } = evaluatePod(pod, this.options);
    if (problem === undefined) this.problems.delete(id);
    else if (this.problems.get(id) !== problem) {
      this.problems.set(id, problem);
      this.log.warn({ pod: id, problem }, 'pod is not used as a worker');
    }
    return worker;
  }

  private add(worker: DiscoveredWorker): void {
    this.known.set(worker.id, worker);
    this.log.info({ worker: worker.id, url: worker.url }, 'discovered worker');
    try {
      this.handlers?.onAdd({ ...worker });
    } catch (err) {
      this.log.error({ err, worker: worker.id }, 'discovery onAdd handler threw');
    }
  }

  private remove(id: string): void {
    this.known.delete(id);
    this.log.info({ worker: id }, 'discovered worker gone');
    try {
      this.handlers?.onRemove(id);
    } catch (err) {
      this.log.error({ err, worker: id }, 'discovery onRemove handler threw');
    }
  }
}
