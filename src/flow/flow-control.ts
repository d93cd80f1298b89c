import { ClientDisconnected, FleetSaturated } from '../errors/http-errors.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import { type FlowHold, type FlowTicket, ModelQueue, type Waiter } from './model-queue.js';
import { type TenantWeight, weighTenants } from './tenant-weight.js';

export type { FlowHold, FlowTicket } from './model-queue.js';
export type { TenantWeight } from './tenant-weight.js';

/**
 * Flow control: when every worker of a model is saturated (its policy says so: the scorer's
 * saturation filter; for a heavy tenant's request, also the scorer's keeping it from the workers
 * the others need, see `tenantWeight`), requests wait here, in the gateway, rather than in the
 * engines' queues, and leave in this order:
 *
 * 1. By priority class, highest first (`flow.classes`). Where replicas share their queues
 *    (`FlowPeers`), a replica does not let a class go while another replica has a higher one
 *    waiting for the same model.
 * 2. Within a class, fair between tenants (API keys): the tenant with the fewest requests of the
 *    model in flight goes first, counting every replica's (`FlowPeers`: so that two replicas do
 *    not each give a hot tenant its full share); equal counts take turns (round robin).
 * 3. Within a tenant, first come first served.
 *
 * Whether a request may go is judged for that request, each time it is judged (`FlowHold`: a
 * heavy tenant's hold, a data-parallel rank and the workers a retry excludes make the fleet full
 * for one request and not for another), with its tenant's weight of that moment: a look at the
 * queue lets go the first waiter, in the order above, that may go, not only the first in line
 * (a held request at the head blocked every other of its model until its own deadline).
 *
 * Each request waits until its own queue deadline at most (`FlowTicket.maxWaitMs`); one whose
 * wait would pass it (the work ahead of it at the rate requests leave the queue) is refused at
 * once. Both are a 503 `fleet_saturated` with `Retry-After`. A request leaves when a worker is no
 * longer saturated: looked at when one of the model's requests ends and every `pollMs`.
 *
 * Engines that schedule by priority are given the same order (`enginePriority`): a request sent
 * there carries its class and whether its tenant is heavy as its `priority`, so that in the
 * engine's own queue a small tenant's request goes before a hot tenant's that came first. Only a
 * heavy tenant (more than `heavyShare` times the mean of the other tenants' requests in flight)
 * goes back: between tenants of about the same weight the engine's queue stays first come, first
 * served (ordering them by their exact counts would starve whoever happens to have one more in
 * flight, and lengthen every tail).
 */

/** What the other replicas report (src/replicas/flow-share.ts); empty without Redis. */
export interface FlowPeers {
  /** Requests of `tenant` for `model` in flight on the other replicas. */
  inflight(model: string, tenant: string): number;
  /** The highest class (lowest index) waiting for `model` on another replica, if any. */
  highestWaiting(model: string): number | undefined;
  /** Requests for `model` in flight on the other replicas, by tenant. */
  inflightByTenant(model: string): ReadonlyMap<string, number> | undefined;
}

export interface FlowOptions {
  readonly classes: readonly string[];
  readonly defaultPriority: number;
  readonly maxWaitMs: number;
  readonly maxQueued: number;
  readonly pollMs: number;
  /** A tenant with more than this many times the mean of the others' requests in flight is heavy (enginePriority). */
  readonly heavyShare: number;
}

/** What this replica reports to the others. */
export interface FlowState {
  /** Requests in flight by model, then tenant. */
  readonly inflight: ReadonlyMap<string, ReadonlyMap<string, number>>;
  /** Requests waiting by model, then class index. */
  readonly waiting: ReadonlyMap<string, ReadonlyMap<number, number>>;
}

export class FlowControl {
  private readonly queues = new Map<string, ModelQueue>();
  private readonly inflight = new Map<string, Map<string, number>>();

  constructor(
    readonly options: FlowOptions,
    private readonly metrics: GatewayMetrics,
    private peers: FlowPeers | undefined = undefined,
    /** The monotonic clock of waits and the queue's rate (tests inject one). */
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The ticket of a request that brings none: no tenant, the default class, the default deadline. */
  ticketOf(ticket: FlowTicket | undefined): FlowTicket {
    this.defaultTicket ??= {
      tenant: '',
      priority: this.options.defaultPriority,
      maxWaitMs: this.options.maxWaitMs,
    };
    return ticket ?? this.defaultTicket;
  }

  private defaultTicket: FlowTicket | undefined;

  /** Where the other replicas' counts come from (set when Redis is configured). */
  setPeers(peers: FlowPeers | undefined): void {
    this.peers = peers;
  }

  /** Requests waiting for `model` now. */
  waiting(model: string): number {
    return this.queues.get(model)?.size ?? 0;
  }

  /** Requests waiting, by model (models with none left out). */
  waitingByModel(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [model, queue] of this.queues) if (queue.size > 0) out[model] = queue.size;
    return out;
  }

  /** This replica's requests in flight of `tenant` for `model`. */
  inflightOf(model: string, tenant: string): number {
    return this.inflight.get(model)?.get(tenant) ?? 0;
  }

  /** Requests of `tenant` for `model` in flight on every replica (this one's and what the others report). */
  tenantLoad(model: string, tenant: string): number {
    return this.inflightOf(model, tenant) + (this.peers?.inflight(model, tenant) ?? 0);
  }

  /**
   * The `priority` (lower goes first) of a request with `ticket` for an engine that schedules by
   * priority: twice its class, plus one when its tenant is heavy.
   */
  enginePriority(model: string, ticket: FlowTicket): number {
    return ticket.priority * 2 + (this.tenantWeight(model, ticket.tenant) === 'heavy' ? 1 : 0);
  }

  /** `tenant`'s weight for `model` now (tenant-weight.ts): read each time it is used. */
  tenantWeight(model: string, tenant: string): TenantWeight {
    return this.weights(model)(tenant);
  }

  /** Every tenant's weight for `model` now, the sums taken once. */
  private weights(model: string): (tenant: string) => TenantWeight {
    return weighTenants(
      this.options.heavyShare,
      this.inflight.get(model),
      this.peers?.inflightByTenant(model),
    );
  }

  /**
   * What this replica reports to the others. Its waiting counts are of the requests the fleet
   * alone holds (hold key '', a tenant not heavy): a request held for its own reasons (a heavy
   * tenant's hold, a rank, a retry's exclusions) would not take a freed worker, and another
   * replica must not keep its lower classes back for it.
   */
  state(): FlowState {
    const waiting = new Map<string, Map<number, number>>();
    for (const [model, queue] of this.queues) {
      if (queue.size === 0) continue;
      const weight = this.weights(model);
      const byClass = new Map<number, number>();
      for (const [c, tenant, line] of queue.lines())
        if (line.plain > 0 && weight(tenant) !== 'heavy') byClass.set(c, (byClass.get(c) ?? 0) + line.plain);
      if (byClass.size > 0) waiting.set(model, byClass);
    }
    return { inflight: this.inflight, waiting };
  }

  /**
   * Lets a request for `model` through at once (undefined), or queues it: the promise resolves
   * with the time it waited once it may go, or rejects with FleetSaturated (its deadline) or
   * ClientDisconnected (`signal` aborted). It waits when the model's queue is not empty (no one
   * jumps it: the queue is looked at in the next turn) or when `hold` says every worker it could
   * go to is saturated. A bare function is a hold of key '' (tests).
   */
  enter(
    model: string,
    ticket: FlowTicket,
    signal: AbortSignal,
    hold: FlowHold | ((weight: TenantWeight) => boolean),
  ): Promise<number> | undefined {
    const judged: FlowHold = typeof hold === 'function' ? { key: '', saturated: hold } : hold;
    const queue = this.queues.get(model);
    if (
      (queue === undefined || queue.size === 0) &&
      !judged.saturated(this.tenantWeight(model, ticket.tenant))
    )
      return undefined;
    return this.wait(model, ticket, signal, judged);
  }

  /**
   * Counts a request of `tenant` for `model` as in flight (it got a worker's slot); the returned
   * function ends it, and lets the model's queue look at the workers again.
   */
  started(model: string, tenant: string): () => void {
    let byTenant = this.inflight.get(model);
    if (!byTenant) {
      byTenant = new Map();
      this.inflight.set(model, byTenant);
    }
    byTenant.set(tenant, (byTenant.get(tenant) ?? 0) + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const n = (byTenant.get(tenant) ?? 1) - 1;
      if (n > 0) byTenant.set(tenant, n);
      else byTenant.delete(tenant);
      if (byTenant.size === 0 && this.inflight.get(model) === byTenant) this.inflight.delete(model);
      this.wake(model);
    };
  }

  /** Lets the model's queue look at the workers again at once (one of them may no longer be saturated). */
  private wake(model: string): void {
    const queue = this.queues.get(model);
    if (queue && queue.size > 0) this.schedule(model, queue, 'now');
  }

  /** Ends every wait with `error` (the gateway closes: GatewayShuttingDown). */
  close(error: Error): void {
    for (const [model, queue] of this.queues) {
      if (queue.pump) {
        clearTimeout(queue.pump as NodeJS.Timeout);
        clearImmediate(queue.pump as NodeJS.Immediate);
        queue.pump = undefined;
      }
      for (const [, , line] of [...queue.lines()])
        for (const waiter of [...line.waiters]) {
          queue.remove(waiter);
          this.cleanup(model, waiter);
          waiter.reject(error);
        }
    }
    this.queues.clear();
  }

  private className(priority: number): string {
    return this.options.classes[priority] ?? String(priority);
  }

  private wait(model: string, ticket: FlowTicket, signal: AbortSignal, hold: FlowHold): Promise<number> {
    if (signal.aborted) return Promise.reject(new ClientDisconnected());
    let queue = this.queues.get(model);
    if (!queue) {
      queue = new ModelQueue(this.options.classes.length);
      this.queues.set(model, queue);
    }
    const now = this.now();
    const labels = { model: this.metrics.modelLabel(model), priority: this.className(ticket.priority) };
    if (queue.size >= this.options.maxQueued) {
      this.metrics.flowRejections.inc(labels);
      return Promise.reject(
        new FleetSaturated(model, 0, this.retryAfter(queue, queue.size, now), 'the queue is full'),
      );
    }
    const ahead = queue.ahead(ticket);
    const rate = queue.rate(now);
    if (rate !== undefined && ahead / rate > ticket.maxWaitMs) {
      this.metrics.flowRejections.inc(labels);
      return Promise.reject(
        new FleetSaturated(
          model,
          0,
          this.retryAfter(queue, ahead, now),
          `${ahead} requests are ahead of this one, more than its queue deadline of ${ticket.maxWaitMs} ms lets leave`,
        ),
      );
    }
    return new Promise<number>((resolve, reject) => {
      const waiter: Waiter = {
        ticket,
        enqueuedAt: now,
        hold,
        resolve,
        reject,
        timer: undefined,
        signal,
        onAbort: () => {
          if (queue.remove(waiter)) {
            this.cleanup(model, waiter);
            reject(new ClientDisconnected());
          }
        },
      };
      waiter.timer = setTimeout(
        () => this.fail(model, queue, waiter, `its queue deadline of ${ticket.maxWaitMs} ms passed`),
        ticket.maxWaitMs,
      );
      signal.addEventListener('abort', waiter.onAbort, { once: true });
      queue.add(waiter);
      this.metrics.flowQueued.inc(labels);
      this.schedule(model, queue, 'now');
    });
  }

  /** Seconds until about `ahead` requests have left the queue (at least 1). */
  private retryAfter(queue: ModelQueue, ahead: number, now: number): number {
    const rate = queue.rate(now);
    const ms = rate === undefined ? this.options.maxWaitMs : ahead / rate;
    return Math.max(1, Math.ceil(ms / 1000));
  }

  private fail(model: string, queue: ModelQueue, waiter: Waiter, reason: string): void {
    if (!queue.remove(waiter)) return;
    this.cleanup(model, waiter);
    const now = this.now();
    this.metrics.flowRejections.inc({
      model: this.metrics.modelLabel(model),
      priority: this.className(waiter.ticket.priority),
    });
    waiter.reject(
      new FleetSaturated(model, now - waiter.enqueuedAt, this.retryAfter(queue, queue.size, now), reason),
    );
  }

  private cleanup(model: string, waiter: Waiter): void {
    if (waiter.timer) clearTimeout(waiter.timer);
    waiter.signal.removeEventListener('abort', waiter.onAbort);
    this.metrics.flowQueued.dec({
      model: this.metrics.modelLabel(model),
      priority: this.className(waiter.ticket.priority),
    });
  }

  /** Looks at the queue again: at once (next turn of the event loop) or after `pollMs`. */
  private schedule(model: string, queue: ModelQueue, when: 'now' | 'later'): void {
    if (queue.pump !== undefined) {
      if (when === 'later') return;
      clearTimeout(queue.pump as NodeJS.Timeout);
      clearImmediate(queue.pump as NodeJS.Immediate);
    }
    queue.pump =
      when === 'now'
        ? setImmediate(() => this.pump(model, queue))
        : setTimeout(() => this.pump(model, queue), this.options.pollMs);
  }

  /**
   * Lets the first waiter that may go go, one per turn of the event loop: the one let go picks
   * its worker (and takes its slot) before the next look at the workers.
   */
  private pump(model: string, queue: ModelQueue): void {
    queue.pump = undefined;
    if (queue.size === 0) {
      if (this.queues.get(model) === queue && queue.size === 0) this.queues.delete(model);
      return;
    }
    const next = this.firstThatMayGo(model, queue);
    if (next === undefined) {
      this.schedule(model, queue, 'later');
      return;
    }
    queue.remove(next);
    queue.rotate(next);
    this.cleanup(model, next);
    const now = this.now();
    queue.noteAdmitted(now);
    const waited = now - next.enqueuedAt;
    this.metrics.flowWait.observe(
      { model: this.metrics.modelLabel(model), priority: this.className(next.ticket.priority) },
      waited / 1000,
    );
    next.resolve(waited);
    if (queue.size > 0) this.schedule(model, queue, 'now');
    else this.queues.delete(model);
  }

  /**
   * The first waiter, in the order they leave (see the top of this file), that may go now, each
   * judged for itself with its tenant's weight of this moment; undefined while none may, or while
   * a higher class than any here that may go waits on another replica. One judgement per hold
   * key and weight in a look: the rest of the queue is not judged once every pair is held.
   */
  private firstThatMayGo(model: string, queue: ModelQueue): Waiter | undefined {
    const elsewhere = this.peers?.highestWaiting(model);
    const weight = this.weights(model);
    const weights = new Map<string, TenantWeight>();
    for (const [, tenant] of queue.lines()) if (!weights.has(tenant)) weights.set(tenant, weight(tenant));
    const pairs = queue.keys.size * new Set(weights.values()).size;
    const held = new Set<string>();
    for (let c = 0; c < queue.classes.length; c++) {
      if (elsewhere !== undefined && elsewhere < c) return undefined;
      const byTenant = queue.classes[c]!;
      if (byTenant.size === 0) continue;
      // Fair between tenants: the fewest in flight (every replica's) first; equal counts in the
      // round's order (the map's, a tenant let go moving to its back). A stable sort keeps it.
      const order = [...byTenant].map(([tenant, line]) => ({
        line,
        tenant,
        load: this.tenantLoad(model, tenant),
      }));
      order.sort((x, y) => x.load - y.load);
      for (const { tenant, line } of order) {
        const w = weights.get(tenant);
        for (const waiter of line.waiters) {
          const pair = `${w ?? ''}\n${waiter.hold.key}`;
          if (held.has(pair)) continue;
          if (!waiter.hold.saturated(w)) return waiter;
          held.add(pair);
          if (held.size >= pairs) return undefined;
        }
      }
    }
    return undefined;
  }
}
