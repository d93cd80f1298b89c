import type { IncomingMessage } from 'node:http';
import { type Faults, parseFault } from './faults.js';
import { header } from './http-io.js';
import type { Ending } from './stream.js';

export interface MockWorkerStats {
  /** Generation requests received (whatever became of them). */
  requests: number;
  inflight: number;
  /** Requests whose client went away before the response ended. */
  aborted: number;
  /** Requests whose response the mock ended itself (injected error ends included; cut connections not). */
  completed: number;
  /** `x-request-id` of each generation request, in order ('' when absent). */
  requestIds: string[];
  /** `x-data-parallel-rank` of each generation request, in order (null when absent). */
  ranks: (number | null)[];
  /** The last 50 parsed generation request bodies. */
  lastBodies: unknown[];
  /** The headers of the last 50 generation requests. */
  lastHeaders: Record<string, string | string[] | undefined>[];
  /** Utility calls received (`POST /flush_cache`, `GET /is_sleeping`, ...), in order. */
  utilityCalls: string[];
}

/** Faults of the utility endpoints (flush_cache, is_sleeping, ...). */
export type UtilityFault = 'http_500' | 'garbage' | 'hang' | undefined;

const KEEP = 50;

function keep<T>(list: T[], item: T): void {
  list.push(item);
  if (list.length > KEEP) list.shift();
}

/**
 * What one mock worker's endpoints share and its handle flips: the stats it counts, the
 * worker-wide fault, whether it is healthy or asleep, and the fault of its utility endpoints.
 */
export class WorkerState {
  readonly stats: MockWorkerStats = {
    requests: 0,
    inflight: 0,
    aborted: 0,
    completed: 0,
    requestIds: [],
    ranks: [],
    lastBodies: [],
    lastHeaders: [],
    utilityCalls: [],
  };
  healthy = true;
  sleeping = false;
  utilityFault: UtilityFault;
  private spec: string | undefined;
  private parsed: Faults;
  /** Faults of one model's requests (set with setFault's `model`). */
  private readonly byModel = new Map<string, Faults>();

  /** Throws FaultSpecError on an invalid spec. */
  constructor(fault: string | undefined) {
    this.spec = fault;
    this.parsed = parseFault(fault);
  }

  /** The worker-wide fault, applied to every request without an `x-mock-fault` header. */
  get faults(): Faults {
    return this.parsed;
  }

  /** The spec the worker-wide fault was set from. */
  get faultSpec(): string | undefined {
    return this.spec;
  }

  /**
   * Sets the worker-wide fault, or with `model` the fault of that model's requests only (an
   * engine that misbehaves for one model); throws FaultSpecError on an invalid spec (and keeps
   * the fault it had). An empty spec clears it.
   */
  setFault(spec: string | undefined, model?: string): void {
    const parsed = parseFault(spec);
    if (model !== undefined) {
      if (spec === undefined || spec.trim() === '') this.byModel.delete(model);
      else this.byModel.set(model, parsed);
      return;
    }
    this.parsed = parsed;
    this.spec = spec;
  }

  /** The fault of a request for `model` without an `x-mock-fault` header; a `once` fault is used up. */
  takeFaults(model: string): Faults {
    const own = this.byModel.get(model);
    if (own) {
      if (own.once) this.byModel.delete(model);
      return own;
    }
    const faults = this.parsed;
    if (faults.once) this.setFault(undefined);
    return faults;
  }

  /** Counts a generation request as it comes in, its body read but not yet parsed. */
  received(req: IncomingMessage): void {
    const stats = this.stats;
    stats.requests++;
    stats.requestIds.push(header(req, 'x-request-id') ?? '');
    const rankHeader = header(req, 'x-data-parallel-rank');
    stats.ranks.push(rankHeader === undefined ? null : Number(rankHeader));
    keep(stats.lastHeaders, { ...req.headers });
  }

  /** Keeps a generation request's parsed body (the last 50). */
  parsedBody(body: unknown): void {
    keep(this.stats.lastBodies, body);
  }

  /** A generation request starts answering. */
  started(): void {
    this.stats.inflight++;
  }

  /** A generation request ended (see Life: once each). */
  readonly ended = (how: Ending): void => {
    this.stats.inflight--;
    if (how === 'completed') this.stats.completed++;
    else if (how === 'aborted') this.stats.aborted++;
  };

  /** Counts a utility call (`POST /flush_cache`, ...). */
  utilityCall(route: string): void {
    this.stats.utilityCalls.push(route);
  }
}
