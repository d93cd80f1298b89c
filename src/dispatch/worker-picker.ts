import { isSluiceError } from '../errors/base.js';
import { ClientDisconnected, NoWorkerAvailable, QueueFull } from '../errors/http-errors.js';
import { ModelNotFound } from '../errors/not-found-errors.js';
import { InvalidDataParallelRank } from '../errors/request-content-errors.js';
import type { FlowControl, FlowTicket, TenantWeight } from '../flow/flow-control.js';
import { requestHold, weighedRoute } from '../flow/request-hold.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { RoutingRecord } from '../observability/tracing.js';
import type { RoutingExplanation } from '../routing/types.js';
import type { RequestRegistry } from '../streams/request-registry.js';
import type { WorkerRegistry } from '../workers/registry.js';
import type { Worker } from '../workers/worker.js';
import { Attempt } from './attempt.js';
import type { Router } from './router.js';
import type { DispatchRequest } from './types.js';

/** One turn of a request's attempt loop: what its pick must know of the turns before it. */
export interface Turn {
  /** 0 for the first attempt; the retry's index after it. */
  readonly number: number;
  /** When the request's one budget ends (`performance.now()` clock). */
  readonly deadlineAt: number;
  /** Workers that failed this request's earlier attempts. */
  readonly tried: ReadonlySet<string> | undefined;
  /** Workers that did not answer in time: never tried again for this request. */
  readonly silent: ReadonlySet<string> | undefined;
  /** The attempt's routing record, when the request is traced. */
  readonly routed: RoutingRecord | undefined;
}

const PANIC_LOG_INTERVAL_MS = 10_000;

/** A pick: the worker, and the characters of the prompt it is expected to prefill (0: not known). */
interface Picked {
  readonly worker: Worker;
  readonly prefill: number;
}

/**
 * Which worker of a model an attempt goes to, and its slot there: a first attempt waits in the
 * gateway's flow control while the fleet is saturated; then the health, data-parallel rank,
 * circuit (panic mode when every one is ejected and nothing comes after the model), queue and
 * retry filters, the model's routing policy, a slot on the worker (waiting in its bounded queue),
 * its circuits, and the attempt registered with a fresh request id.
 */
export class WorkerPicker {
  private readonly panicLoggedAt = new Map<string, number>();

  constructor(
    private readonly registry: WorkerRegistry,
    private readonly router: Router,
    private readonly requests: RequestRegistry,
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
    /** Flow control: requests wait here while every worker of a scorer-routed model is saturated. */
    private readonly flow: FlowControl | undefined,
  ) {}

  /**
   * Picks a worker, waits for a slot on it, and registers a new attempt with a fresh request id.
   * With a slot free at once (the usual case) the attempt is returned as it is, not in a promise.
   */
  acquire(request: DispatchRequest, turn: Turn): Attempt | Promise<Attempt> {
    // A first attempt waits in the gateway while every worker it could go to is saturated.
    const flow = this.flow;
    // Whether the model's requests go through flow control (its policy judges saturation): asked once.
    const flowed = flow !== undefined && this.router.judgesSaturation(request.model);
    if (!flowed) return this.pickAndAcquire(request, turn, false);
    const tenant = flow.ticketOf(request.flow).tenant;
    if (turn.number === 0) {
      const ticket = ticketOf(request, flow, turn.deadlineAt);
      const hold = requestHold(request, this.registry, (able, route) =>
        this.router.saturated(request.model, able, route),
      );
      const waiting = flow.enter(request.model, ticket, request.signal, hold);
      if (waiting)
        return waiting.then((ms) => {
          if (turn.routed) {
            turn.routed.waitedMs = ms;
            turn.routed.priority = flow.options.classes[ticket.priority] ?? String(ticket.priority);
          }
          // The tenant's weight read again: it may have changed while the request waited.
          return this.pickAndAcquire(
            this.weighed(request, flow.tenantWeight(request.model, tenant)),
            turn,
            true,
          );
        });
      // Let through at once: judged a moment ago with the tenant's weight of now.
      return this.pickAndAcquire(this.weighed(request, hold.judgedWith), turn, true);
    }
    // While one tenant is heavy, the policy is told whose request this is (RouteContext.tenantWeight).
    return this.pickAndAcquire(this.weighed(request, flow.tenantWeight(request.model, tenant)), turn, true);
  }

  /** The request with its routing context as its policy is to see it (weighedRoute). */
  private weighed(request: DispatchRequest, weight: TenantWeight): DispatchRequest {
    const route = weighedRoute(request, weight, this.registry);
    return route === request.route ? request : { ...request, route };
  }

  private pickAndAcquire(req: DispatchRequest, turn: Turn, flowed: boolean): Attempt | Promise<Attempt> {
    const serving = this.registry.forModel(req.model);
    // The usual case first: a first attempt with nothing excluded, every worker of the model
    // healthy, admitting and with a free slot; the filters of `pick` would keep all of them.
    const allFree =
      turn.tried === undefined &&
      req.exclude === undefined &&
      req.rank === undefined &&
      allReady(serving, req.model);
    const { worker, panic, prefill } = allFree
      ? { ...this.pickFrom(req, serving, turn.routed), panic: false }
      : this.pick(req, serving, turn.tried, turn.silent, turn.routed);
    const rank = worker.chooseRank(req.rank);
    if (worker.limiter.tryAcquire())
      return this.admit(req, worker, rank, panic, turn.number, flowed, prefill);
    return this.waitForSlot(req, worker).then(() =>
      this.admit(req, worker, rank, panic, turn.number, flowed, prefill),
    );
  }

  /** Waits for a slot on `worker` (its queue is bounded in length and time). */
  private async waitForSlot(req: DispatchRequest, worker: Worker): Promise<void> {
    try {
      await worker.limiter.acquire(req.signal);
    } catch (err) {
      if (req.signal.aborted) throw new ClientDisconnected();
      if (isSluiceError(err))
        this.metrics.admissionRejections.inc({ model: this.metrics.modelLabel(req.model), code: err.code });
      throw err;
    }
  }

  /** With a slot held on `worker`: passes its circuits and registers the attempt. */
  private admit(
    req: DispatchRequest,
    worker: Worker,
    rank: number,
    panic: boolean,
    n: number,
    flowed: boolean,
    prefill: number,
  ): Attempt {
    const admitted = panic || this.tryAdmit(worker, req.model);
    if (!admitted) {
      worker.limiter.release();
      throw new NoWorkerAvailable(req.model, 1, 'circuit open');
    }
    const requestId = n === 0 ? req.requestId : `${req.requestId}-retry${n}`;
    const attempt = new Attempt(req.api, worker, requestId, rank, n, this.requests, req.model);
    // Counted before this request is: its tenant's requests in flight without it.
    if (worker.priorityScheduling) attempt.enginePriority = this.enginePriorityOf(req);
    if (flowed && this.flow) attempt.onRelease = this.flow.started(req.model, req.flow?.tenant ?? '');
    // Streams only: a non-streaming answer has no first token to end the count at (its whole
    // generation would count as prefill). A first token does not wake flow control: unbounded,
    // the default, pending prefill saturates nothing, and a wake at every first token cost a
    // burst of streams CPU and time to first token; a bound is looked at every flow.pollMs.
    if (prefill > 0 && req.stream) attempt.prefilling(prefill);
    try {
      this.requests.register(attempt);
    } catch (err) {
      attempt.release('neutral');
      throw err;
    }
    return attempt;
  }

  /** The `priority` of a request sent to an engine that schedules by priority (FlowControl.enginePriority). */
  private enginePriorityOf(req: DispatchRequest): number {
    const flow = this.flow;
    if (!flow) return 0;
    return flow.enginePriority(req.model, flow.ticketOf(req.flow));
  }

  /** Whether every worker of the model has failed this request already (a retry goes back to one). */
  everyWorkerTried(model: string, tried: ReadonlySet<string>): boolean {
    return this.registry.forModel(model).every((w) => tried.has(w.id));
  }

  /** Picks a worker through the health, circuit, queue and retry filters (see acquire). */
  private pick(
    req: DispatchRequest,
    serving: readonly Worker[],
    tried: ReadonlySet<string> | undefined,
    silent: ReadonlySet<string> | undefined,
    routed: RoutingRecord | undefined,
  ): Picked & { panic: boolean } {
    // A model whose last worker left after its request was admitted (discovery) is gone.
    if (serving.length === 0) throw new ModelNotFound(req.model);
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
    return { ...this.pickFrom(req, free.length > 0 ? free : candidates, routed), panic };
  }

  /** The policy's pick among `candidates`, with the prompt characters it expects that worker to prefill. */
  private pickFrom(
    req: DispatchRequest,
    candidates: readonly Worker[],
    routed: RoutingRecord | undefined,
  ): Picked {
    const worker = this.router.pick(req.model, candidates, req.route);
    // Read at once: the next decision replaces the explanation.
    const explanation = this.router.explanation(req.model);
    if (routed) {
      routed.workerId = worker.id;
      routed.candidates = candidates.length;
      routed.explanation = explanation;
    }
    if (explanation) this.noteDecision(req.model, worker, explanation);
    return { worker, prefill: explanation?.prefillChars ?? 0 };
  }

  /** A policy's explanation of its pick: in the metrics and the dashboard (the trace has it in its record). */
  private noteDecision(model: string, worker: Worker, explanation: RoutingExplanation): void {
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

  /** Takes the right to send one request through the worker's own circuit and the model's. */
  private tryAdmit(worker: Worker, model: string): boolean {
    if (!worker.breaker.tryAdmit()) return false;
    if (worker.modelBreaker(model).tryAdmit()) return true;
    worker.breaker.release();
    return false;
  }

  /** Counts a request routed in panic mode, and says so in the log at most every 10 s per model. */
  private notePanic(req: DispatchRequest): void {
    const model = this.metrics.modelLabel(req.model);
    this.metrics.breakerPanics.inc({ model });
    const now = performance.now();
    if ((this.panicLoggedAt.get(model) ?? Number.NEGATIVE_INFINITY) + PANIC_LOG_INTERVAL_MS > now) return;
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

/** The request's flow ticket, its queue deadline within what is left of its one budget. */
function ticketOf(req: DispatchRequest, flow: FlowControl, deadlineAt: number): FlowTicket {
  const ticket = flow.ticketOf(req.flow);
  const left = Math.max(1, Math.floor(deadlineAt - performance.now()));
  return left < ticket.maxWaitMs ? { ...ticket, maxWaitMs: left } : ticket;
}

/** Whether every one of `workers` (at least one) is healthy, admits `model` and has a free slot. */
function allReady(workers: readonly Worker[], model: string): boolean {
  if (workers.length === 0) return false;
  for (const w of workers) if (!w.healthy || !w.admits(model) || !w.limiter.hasFreeSlot) return false;
  return true;
}
