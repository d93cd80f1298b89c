import { SluiceError } from './base.js';

/**
 * The gateway's own state: no room for a request (admission), shutting down or restarted, an
 * internal error, a client gone. The request itself may be fine: most are worth sending again.
 */

/** No worker can take the request now: all unhealthy, circuits open, or queues full. */
export class NoWorkerAvailable extends SluiceError {
  readonly code = 'no_worker_available';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(
    readonly model: string,
    readonly retryAfterSeconds = 1,
    reason = 'no healthy worker',
  ) {
    super(`No worker is available for model '${model}' (${reason}).`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': String(this.retryAfterSeconds) };
  }
}

/** Every worker of the model is at capacity and its queue is full. */
export class QueueFull extends SluiceError {
  readonly code = 'queue_full';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(
    readonly workerId: string,
    readonly retryAfterSeconds = 1,
  ) {
    super(`All workers for this model are at capacity and their queues are full.`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': String(this.retryAfterSeconds) };
  }
}

/** The request waited its worker's `queueTimeoutMs` for a free slot. */
export class QueueTimeout extends SluiceError {
  readonly code = 'queue_timeout';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(
    readonly waitedMs: number,
    readonly retryAfterSeconds = 1,
  ) {
    super(`The request waited ${waitedMs} ms for a free worker slot and timed out.`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': String(this.retryAfterSeconds) };
  }
}

/**
 * Every worker of the model is saturated (flow control) and the request's queue deadline passed
 * while it waited in the gateway, or would have (the queue ahead of it, at the rate requests
 * leave it), or the gateway's queue for the model is full.
 */
export class FleetSaturated extends SluiceError {
  readonly code = 'fleet_saturated';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(
    readonly model: string,
    /** How long it waited (0: refused at once). */
    readonly waitedMs: number,
    readonly retryAfterSeconds: number,
    reason: string,
  ) {
    super(`Every worker of model '${model}' is saturated: ${reason}.`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': String(this.retryAfterSeconds) };
  }
  override details(): Record<string, unknown> {
    return { waited_ms: Math.round(this.waitedMs) };
  }
}

/** The gateway is draining for shutdown: it takes no new requests. */
export class GatewayShuttingDown extends SluiceError {
  readonly code = 'gateway_shutting_down';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor() {
    super('The gateway is shutting down and accepts no new requests.');
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1', connection: 'close' };
  }
}

/**
 * The gateway process running a background response stopped (crash, kill, lost host) before it
 * ended; a live replica ended it once that process's lease lapsed. Never thrown over HTTP: it is
 * the `error` of the failed response and of its terminal event.
 */
export class GatewayRestarted extends SluiceError {
  readonly code = 'gateway_restarted';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor() {
    super('The gateway process running this response stopped before it finished; it was ended as failed.');
  }
}

/** Anything we did not foresee. The message is generic on purpose; details go to the log. */
export class InternalError extends SluiceError {
  readonly code = 'internal_error';
  readonly retryable = false;
  override readonly status = 500;
  override readonly type = 'server_error' as const;
  constructor(message = 'The gateway hit an internal error.') {
    super(message);
  }
}

/** The client went away before the response ended. Never sent (nobody is listening); logged and counted. */
export class ClientDisconnected extends SluiceError {
  readonly code = 'client_disconnected';
  readonly retryable = false;
  override readonly status = 499;
  override readonly type = 'server_error' as const;
  constructor() {
    super('The client closed the connection before the response ended.');
  }
}
