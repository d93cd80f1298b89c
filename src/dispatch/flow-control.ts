import { ClientDisconnected, FleetSaturated } from '../errors/http-errors.js';
import type { GatewayMetrics } from '../observability/metrics.js';

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

/** What a request brings to flow control: whose it is, how urgent, how long it may wait. */
export interface FlowTicket {
  /** The tenant fairness is between: the API key's id, a tenant header's value, or ''. */
  readonly tenant: string;
  /** Its class's index in `flow.classes` (0: the highest). */
  readonly priority: number;
  /** Its queue deadline. */
  readonly maxWaitMs: number;
}

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

interface Waiter {
  readonly ticket: FlowTicket;
  readonly enqueuedAt: number;
  /** Whether every worker this request could go to is saturated now. */
  readonly saturated: () => boolean;
  readonly resolve: (waitedMs: number) => void;
  readonly reject: (err: Error) => void;
  timer: NodeJS.Timeout | undefined;
  signal: AbortSignal;
  onAbort: () => void;
}

/** Admissions kept to measure the rate requests leave a model's queue. */
const RATE_WINDOW = 64;

/** One model's waiting requests. */
class ModelQueue {
  /** By class index, then tenant (insertion order is the round-robin turn), FIFO within a tenant. */
  readonly classes: Map<string, Waiter[]>[];
  size = 0;
  /** When the last admissions from this queue happened (performance.now), oldest first. */
  readonly admitted: number[] = [];
  pump: NodeJS.Immediate | NodeJS.Timeout | undefined;

  constructor(classCount: number) {
    this.classes = Array.from({ length: classCount }, () => new Map<string, Waiter[]>());
  }

  add(waiter: Waiter): void {
    const byTenant = this.classes[waiter.ticket.priority]!;
    const own = byTenant.get(waiter.ticket.tenant);
    if (own) own.push(waiter);
    else byTenant.set(waiter.ticket.tenant, [waiter]);
    this.size++;
  }

  remove(waiter: Waiter): boolean {
    const byTenant = this.classes[waiter.ticket.priority]!;
    const own = byTenant.get(waiter.ticket.tenant);
    const at = own ? own.indexOf(waiter) : -1;
    if (!own || at < 0) return false;
    own.splice(at, 1);
    if (own.length === 0) byTenant.delete(waiter.ticket.tenant);
    this.size--;
    return true;
  }

  /** The highest class with a waiter. */
  highest(): number | undefined {
    for (let c = 0; c < this.classes.length; c++) if (this.classes[c]!.size > 0) return c;
    return undefined;
  }

  /** Requests leaving per ms, over the last admissions; undefined before there are two. */
  rate(now: number): number | undefined {
    const n = this.admitted.length;
    if (n < 2) return undefined;
    // Until now, not the last admission: a queue that stopped moving has a falling rate.
    const span = now - this.admitted[0]!;
    return span > 0 ? (n - 1) / span : undefined;
  }

  /**
   * Requests that would leave before one more of `ticket`'s: every one of higher classes, and in
   * its class, taking turns, up to as many of each tenant as its own tenant has ahead plus one.
   */
  ahead(ticket: FlowTicket): number {
    let n = 0;
    for (let c = 0; c < ticket.priority; c++) for (const list of this.classes[c]!.values()) n += list.length;
    const own = (this.classes[ticket.priority]!.get(ticket.tenant)?.length ?? 0) + 1;
    for (const [tenant, list] of this.classes[ticket.priority]!)
      if (tenant !== ticket.tenant) n += Math.min(list.length, own);
    return n + own - 1;
  }
}

export class FlowControl {
  private readonly queues = new Map<string, ModelQueue>();
  private readonly inflight = new Map<string, Map<string, number>>();

  constructor(
    readonly options: FlowOptions,
    private readonly metrics: GatewayMetrics,
    private peers: FlowPeers | undefined = undefined,
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

  /**
   * 'heavy' when `tenant` has more than `heavyShare` times the mean of the other tenants'
   * requests for `model` in flight (those that have any; every replica's; never when no other
   * tenant has any); 'light' when it is not but another tenant is; undefined while none is. The
   * engines' priority sends a heavy tenant back; the scorer keeps its long prompts from the
   * workers the others need (RouteContext.tenantWeight). One pass over the tenants in flight.
   */
  tenantWeight(model: string, tenant: string): 'heavy' | 'light' | undefined {
    const here = this.inflight.get(model);
    const elsewhere = this.peers?.inflightByTenant(model);
    let total = 0;
    let tenants = 0;
    let own = 0;
    let most = 0;
    const count = (name: string, n: number) => {
      if (n <= 0) return;
      total += n;
      tenants++;
      if (name === tenant) own = n;
      if (n > most) most = n;
    };
    if (here) for (const [name, n] of here) count(name, n + (elsewhere?.get(name) ?? 0));
    if (elsewhere) for (const [name, n] of elsewhere) if (!here?.has(name)) count(name, n);
    // A tenant with n in flight is heavy past heavyShare times the others' mean; the test grows
    // with n, so some tenant is heavy exactly when the one with the most is.
    const heavy = (n: number) => n > 0 && n > (this.options.heavyShare * (total - n)) / (tenants - 1);
    if (tenants < 2) return undefined;
    if (heavy(own)) return 'heavy';
    return heavy(most) ? 'light' : undefined;
  }

  /** What this replica reports to the others. */
  state(): FlowState {
    const waiting = new Map<string, Map<number, number>>();
    for (const [model, queue] of this.queues) {
      if (queue.size === 0) continue;
      const byClass = new Map<number, number>();
      queue.classes.forEach((byTenant, c) => {
        let n = 0;
        for (const list of byTenant.values()) n += list.length;
        if (n > 0) byClass.set(c, n);
      });
      waiting.set(model, byClass);
    }
    return { inflight: this.inflight, waiting };
  }

  /**
   * Lets a request for `model` through at once (undefined), or queues it: the promise resolves
   * with the time it waited once it may go, or rejects with FleetSaturated (its deadline) or
   * ClientDisconnected (`signal` aborted). It waits when the model's queue is not empty (no one
   * jumps it) or when `saturated()` says every worker it could go to is saturated.
   */
  enter(
    model: string,
    ticket: FlowTicket,
    signal: AbortSignal,
    saturated: () => boolean,
  ): Promise<number> | undefined {
    const queue = this.queues.get(model);
    if ((queue === undefined || queue.size === 0) && !saturated()) return undefined;
    return this.wait(model, ticket, signal, saturated);
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
      for (const byTenant of queue.classes)
        for (const list of byTenant.values())
          for (const waiter of [...list]) {
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

  private wait(
    model: string,
    ticket: FlowTicket,
    signal: AbortSignal,
    saturated: () => boolean,
  ): Promise<number> {
    if (signal.aborted) return Promise.reject(new ClientDisconnected());
    let queue = this.queues.get(model);
    if (!queue) {
      queue = new ModelQueue(this.options.classes.length);
      this.queues.set(model, queue);
    }
    const now = performance.now();
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
        saturated,
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
    const now = performance.now();
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
   * Lets the next request go when a worker is not saturated, one per turn of the event loop: the
   * one let go picks its worker (and takes its slot) before the next look at the workers.
   */
  private pump(model: string, queue: ModelQueue): void {
    queue.pump = undefined;
    if (queue.size === 0) {
      if (this.queues.get(model) === queue && queue.size === 0) this.queues.delete(model);
      return;
    }
    const next = this.next(model, queue);
    if (next === undefined || next.saturated()) {
      this.schedule(model, queue, 'later');
      return;
    }
    queue.remove(next);
    // Its turn taken: a tenant with more waiting goes to the back of the round.
    const byTenant = queue.classes[next.ticket.priority]!;
    const rest = byTenant.get(next.ticket.tenant);
    if (rest) {
      byTenant.delete(next.ticket.tenant);
      byTenant.set(next.ticket.tenant, rest);
    }
    this.cleanup(model, next);
    const now = performance.now();
    queue.admitted.push(now);
    if (queue.admitted.length > RATE_WINDOW) queue.admitted.shift();
    const waited = now - next.enqueuedAt;
    this.metrics.flowWait.observe(
      { model: this.metrics.modelLabel(model), priority: this.className(next.ticket.priority) },
      waited / 1000,
    );
    next.resolve(waited);
    if (queue.size > 0) this.schedule(model, queue, 'now');
    else this.queues.delete(model);
  }

  /** The request to let go next (see the top of this file), or undefined while a higher class waits elsewhere. */
  private next(model: string, queue: ModelQueue): Waiter | undefined {
    const c = queue.highest();
    if (c === undefined) return undefined;
    const elsewhere = this.peers?.highestWaiting(model);
    if (elsewhere !== undefined && elsewhere < c) return undefined;
    const byTenant = queue.classes[c]!;
    let best: string | undefined;
    let fewest = Number.POSITIVE_INFINITY;
    for (const tenant of byTenant.keys()) {
      const n = this.tenantLoad(model, tenant);
      if (n < fewest) {
        fewest = n;
        best = tenant;
      }
    }
    return byTenant.get(best!)![0];
  }
}
