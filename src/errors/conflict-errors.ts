import { SluiceError } from './base.js';

/** Requests that clash with what exists or runs already: 409s. */

/** The base of every 409 a client caused (`invalid_request_error`). */
export abstract class Conflict extends SluiceError {
  readonly retryable = false;
  override readonly status = 409;
  override readonly type = 'invalid_request_error' as const;
  override readonly param: string | null;
  constructor(message: string, param: string | null = null) {
    super(message);
    this.param = param;
  }
}

/** An admin request adds a worker whose id is registered already. */
export class WorkerExists extends Conflict {
  readonly code = 'worker_exists';
  constructor(id: string) {
    super(`A worker with id '${id}' is already registered.`);
  }
}

/** A request id (`X-Request-Id`) is already in flight. Rejected before anything is sent. */
export class DuplicateRequestId extends Conflict {
  readonly code = 'duplicate_request_id';
  constructor(readonly requestId: string) {
    super(`A request with id '${requestId}' is already in flight.`, 'x-request-id');
  }
}
