import type { TenantWeight } from './tenant-weight.js';

/** What a request brings to flow control: whose it is, how urgent, how long it may wait. */
export interface FlowTicket {
  /** The tenant fairness is between: the API key's id, a tenant header's value, or ''. */
  readonly tenant: string;
  /** Its class's index in `flow.classes` (0: the highest). */
  readonly priority: number;
  /** Its queue deadline. */
  readonly maxWaitMs: number;
}

/** When a request must wait: judged for that request, each time it is judged. */
export interface FlowHold {
  /**
   * Requests of one key are held or let go alike, for a tenant of the same weight: '' for a
   * request that may go to any worker of its model, else what narrows its workers (a
   * data-parallel rank, the workers a retry excludes).
   */
  readonly key: string;
  /** Whether every worker this request could go to is saturated now, for a tenant of `weight`. */
  saturated(weight: TenantWeight): boolean;
}

export interface Waiter {
  readonly ticket: FlowTicket;
  readonly enqueuedAt: number;
  readonly hold: FlowHold;
  readonly resolve: (waitedMs: number) => void;
  readonly reject: (err: Error) => void;
  timer: NodeJS.Timeout | undefined;
  signal: AbortSignal;
  onAbort: () => void;
}

/** One tenant's waiters of one class, first come first served. */
interface TenantLine {
  readonly waiters: Waiter[];
  /** How many of them may go to any worker of the model (hold key ''). */
  plain: number;
}

/** Admissions kept to measure the rate requests leave a model's queue. */
const RATE_WINDOW = 64;

/** One model's waiting requests. */
export class ModelQueue {
  /** By class index, then tenant (insertion order is the round-robin turn), FIFO within a tenant. */
  readonly classes: Map<string, TenantLine>[];
  size = 0;
  /** Waiters by hold key (how many distinct judgements a look at the queue needs at most). */
  readonly keys = new Map<string, number>();
  /** When the last admissions from this queue happened (performance.now), oldest first. */
  readonly admitted: number[] = [];
  pump: NodeJS.Immediate | NodeJS.Timeout | undefined;

  constructor(classCount: number) {
    this.classes = Array.from({ length: classCount }, () => new Map<string, TenantLine>());
  }

  add(waiter: Waiter): void {
    const byTenant = this.classes[waiter.ticket.priority]!;
    let line = byTenant.get(waiter.ticket.tenant);
    if (!line) {
      line = { waiters: [], plain: 0 };
      byTenant.set(waiter.ticket.tenant, line);
    }
    line.waiters.push(waiter);
    if (waiter.hold.key === '') line.plain++;
    this.keys.set(waiter.hold.key, (this.keys.get(waiter.hold.key) ?? 0) + 1);
    this.size++;
  }

  remove(waiter: Waiter): boolean {
    const byTenant = this.classes[waiter.ticket.priority]!;
    const line = byTenant.get(waiter.ticket.tenant);
    const at = line ? line.waiters.indexOf(waiter) : -1;
    if (!line || at < 0) return false;
    line.waiters.splice(at, 1);
    if (waiter.hold.key === '') line.plain--;
    if (line.waiters.length === 0) byTenant.delete(waiter.ticket.tenant);
    const n = (this.keys.get(waiter.hold.key) ?? 1) - 1;
    if (n > 0) this.keys.set(waiter.hold.key, n);
    else this.keys.delete(waiter.hold.key);
    this.size--;
    return true;
  }

  /** Its turn taken: a tenant with more waiting goes to the back of its class's round. */
  rotate(waiter: Waiter): void {
    const byTenant = this.classes[waiter.ticket.priority]!;
    const line = byTenant.get(waiter.ticket.tenant);
    if (!line) return;
    byTenant.delete(waiter.ticket.tenant);
    byTenant.set(waiter.ticket.tenant, line);
  }

  /** Every waiter, by class then tenant, with each tenant's line. */
  *lines(): Generator<[number, string, TenantLine]> {
    for (let c = 0; c < this.classes.length; c++)
      for (const [tenant, line] of this.classes[c]!) yield [c, tenant, line];
  }

  noteAdmitted(now: number): void {
    this.admitted.push(now);
    if (this.admitted.length > RATE_WINDOW) this.admitted.shift();
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
    for (let c = 0; c < ticket.priority; c++)
      for (const line of this.classes[c]!.values()) n += line.waiters.length;
    const own = (this.classes[ticket.priority]!.get(ticket.tenant)?.waiters.length ?? 0) + 1;
    for (const [tenant, line] of this.classes[ticket.priority]!)
      if (tenant !== ticket.tenant) n += Math.min(line.waiters.length, own);
    return n + own - 1;
  }
}
