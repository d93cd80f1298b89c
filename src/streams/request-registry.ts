import { DuplicateRequestId } from '../errors/conflict-errors.js';
import type { StreamError } from '../errors/stream-errors.js';

export interface InFlightRequest {
  readonly requestId: string;
  readonly workerId: string;
  /** Ends the request's output stream with `error` (the client gets the terminal error). */
  close(error: StreamError): void;
}

/**
 * Every upstream request in flight, keyed by its request id. Ids are unique while in flight
 * (a second one is a DuplicateRequestId); on shutdown every open stream is closed with one error.
 */
export class RequestRegistry {
  private readonly requests = new Map<string, InFlightRequest>();
  private closedWith: StreamError | undefined;

  get size(): number {
    return this.requests.size;
  }

  has(requestId: string): boolean {
    return this.requests.has(requestId);
  }

  register(request: InFlightRequest): void {
    if (this.closedWith) throw this.closedWith;
    if (this.requests.has(request.requestId)) throw new DuplicateRequestId(request.requestId);
    this.requests.set(request.requestId, request);
  }

  unregister(requestId: string): void {
    this.requests.delete(requestId);
  }

  /** In-flight requests of one worker. */
  forWorker(workerId: string): InFlightRequest[] {
    return [...this.requests.values()].filter((r) => r.workerId === workerId);
  }

  /** Refuses new requests with `error` and closes every open one with it. */
  closeAll(error: StreamError): void {
    this.closedWith = error;
    for (const request of [...this.requests.values()]) request.close(error);
  }
}
