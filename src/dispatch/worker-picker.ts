import { NoWorkerAvailable, QueueFull } from '../errors/http-errors.js';
import { InvalidDataParallelRank } from '../errors/request-content-errors.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { RoutingTrace } from '../observability/tracing.js';
import type { RoutingExplanation } from '../routing/types.js';
import type { Worker } from '../workers/worker.js';
import type { Router } from './router.js';
import type { DispatchRequest } from './types.js';

const PANIC_LOG_INTERVAL_MS = 10_000;

/**
 * Which worker of a model an attempt goes to: through the health, data-parallel rank, circuit
 * (panic mode when every one is ejected and nothing comes after the model), queue and retry
 * filters, then the model's routing policy.
 */
export class WorkerPicker {
  private readonly panicLoggedAt = new Map<string, number>();

  constructor(
    private readonly router: Router,
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
  ) {}

  /** Picks a worker through the health, circuit, queue and retry filters (see acquire). */
  pick(
    req: DispatchRequest,
    serving: readonly Worker[],
    tried: ReadonlySet<string> | undefined,
    silent: ReadonlySet<string> | undefined,
    routing: RoutingTrace | undefined,
  ): { worker: Worker; panic: boolean } {
    const exclude = req.exclude;
    const reachable = silent ? serving.filter((w) => !silent.has(w.id)) : serving;
    const all = this.withRank(exclude ? reachable.filter((w) => !exclude.has(w.id)) : reachable, req.rank);
    const healthy = all.filter((w) => w.healthy);
    let admitting = healthy.filter((w) => w.admits(req.model));
    // Panic mode: the circuits never cause a total outage; with every healthy worker of the model
    // ejected, the request goes to them anyway, unless it has a model to fall back to (an open
    // circuit skips the route: the fallback answers at once).
    const hasFallback = (req.fallbacks?.length ?? 0) > 0;
    const panic = admitting.length === 0 && healthy.length > 0 && !hasFallback;
    if (panic) {
      admitting = healthy;
      this.notePanic(req);
    }
    if (admitting.length === 0) {
      const causes = [...new Set(all.map((w) => w.downCause).filter((c): c is string => c !== null))];
      this.metrics.admissionRejections.inc({
        model: this.metrics.modelLabel(req.model),
        code: 'no_worker_available',
      });
      throw new NoWorkerAvailable(
        req.model,
        1,
        causes.length > 0 ? `no healthy worker: ${causes.join('; ')}` : 'no healthy worker',
      );
    }
    const withRoom = admitting.filter((w) => w.limiter.canQueue);
    if (withRoom.length === 0) {
      const full = new QueueFull(
        admitting[0]!.id,
        Math.max(1, Math.ceil(admitting[0]!.limiter.queueTimeoutMs / 1000)),
      );
      this.metrics.admissionRejections.inc({ model: this.metrics.modelLabel(req.model), code: full.code });
      throw full;
    }
    const untried = tried === undefined ? withRoom : withRoom.filter((w) => !tried.has(w.id));
    const candidates = untried.length > 0 ? untried : withRoom;
    const free = candidates.filter((w) => w.limiter.hasFreeSlot);
    return { worker: this.pickFrom(req, free.length > 0 ? free : candidates, routing), panic };
  }

  pickFrom(req: DispatchRequest, candidates: readonly Worker[], routing: RoutingTrace | undefined): Worker {
    const worker = this.router.pick(req.model, candidates, req.route);
    routing?.picked(worker.id, candidates.length);
    const explanation = this.router.explanation(req.model);
    if (explanation) this.noteDecision(req.model, worker, explanation, routing);
    return worker;
  }

  /** A policy's explanation of its pick: in the routing span, the metrics and the dashboard. */
  private noteDecision(
    model: string,
    worker: Worker,
    explanation: RoutingExplanation,
    routing: RoutingTrace | undefined,
  ): void {
    routing?.explained(explanation);
    const label = this.metrics.modelLabel(model);
    this.metrics.routingDecisions.inc({ model: label, worker: worker.id, decided_by: explanation.decidedBy });
    // An explanation is made for one decision and never changed after (RoutingExplanation is
    // readonly throughout): kept as it is, not copied, on every request's path.
    this.metrics.decisions.push({
      model: label,
      worker: worker.id,
      decidedBy: explanation.decidedBy,
      filtered: explanation.filtered,
      scores: explanation.scores,
      at: Date.now(),
    });
  }

  /**
   * Whether a request for `req.model` should wait in the gateway: its model's policy judges
   * saturation (the scorer) and every worker that could take it now (healthy, circuit admitting,
   * queue not full) is saturated. False when none could: the pick then says why.
   */
  fleetSaturated(req: DispatchRequest, serving: readonly Worker[]): boolean {
    if (!this.router.judgesSaturation(req.model)) return false;
    const exclude = req.exclude;
    const able = serving.filter(
      (w) =>
        w.healthy &&
        w.admits(req.model) &&
        w.limiter.canQueue &&
        (exclude === undefined || !exclude.has(w.id)) &&
        (req.rank === undefined || w.dpSize > req.rank),
    );
    return able.length > 0 && this.router.saturated(req.model, able, req.route);
  }

  /** Takes the right to send one request through the worker's own circuit and the model's. */
  tryAdmit(worker: Worker, model: string): boolean {
    if (!worker.breaker.tryAdmit()) return false;
    if (worker.modelBreaker(model).tryAdmit()) return true;
    worker.breaker.release();
    return false;
  }

  /** Counts a request routed in panic mode, and says so in the log at most every 10 s per model. */
  private notePanic(req: DispatchRequest): void {
    const model = this.metrics.modelLabel(req.model);
    this.metrics.breakerPanics.inc({ model });
    const now = Date.now();
    if ((this.panicLoggedAt.get(model) ?? 0) + PANIC_LOG_INTERVAL_MS > now) return;
    this.panicLoggedAt.set(model, now);
    this.log.warn(
      { requestId: req.requestId, model },
      'every worker of the model is ejected by its circuit breaker: routing to them anyway (panic mode)',
    );
  }

  /** The workers that have the data-parallel rank a request asks for (all of them when it asks for none). */
  private withRank(workers: readonly Worker[], rank: number | undefined): readonly Worker[] {
    if (rank === undefined || workers.length === 0) return workers;
    const able = workers.filter((w) => w.dpSize > rank);
    if (able.length === 0) {
      const widest = workers.reduce((a, b) => (b.dpSize > a.dpSize ? b : a), workers[0]!);
      throw new InvalidDataParallelRank(rank, widest.connectedRanks());
    }
    return able;
  }
}

export function allReady(workers: readonly Worker[], model: string): boolean {
  if (workers.length === 0) return false;
  for (const w of workers) if (!w.healthy || !w.admits(model) || !w.limiter.hasFreeSlot) return false;
  return true;
}
