import type { StreamError } from '../errors/stream-errors.js';
import type { ApiName } from '../observability/metrics.js';
import type { AttemptTrace } from '../observability/tracing.js';
import type { EngineStream } from '../streams/engine-stream.js';
import type { InFlightRequest, RequestRegistry } from '../streams/request-registry.js';
import type { Worker } from '../workers/worker.js';
import { Cancellation } from './cancellation.js';

/**
 * How an attempt ended, as far as the circuit breakers are concerned: `worker_failure` is the
 * worker's (no connection, no answer at all), `model_failure` the request's model's on that
 * worker (an error status, an error frame, a broken or stalled stream).
 */
export type AttemptOutcome = 'success' | 'worker_failure' | 'model_failure' | 'neutral';

/**
 * One upstream request to one worker, with its own fresh request id. Holds the worker's
 * concurrency slot and data-parallel rank until `release`, which is idempotent. It is its own
 * entry in the registry of requests in flight.
 */
export class Attempt implements InFlightRequest {
  /** Aborts the upstream request (a Cancellation: an AbortController costs more). */
  readonly controller = new Cancellation();
  readonly startedAt = performance.now();
  stream: EngineStream | undefined;
  /** This attempt's client span (tracing on and the request sampled), ended on release. */
  span: AttemptTrace | undefined;
  /** The `priority` its body is sent with, for an engine that schedules by priority (else undefined). */
  enginePriority: number | undefined;
  /** Called once on release (flow control's count of the tenant's requests in flight). */
  onRelease: (() => void) | undefined;
  private released = false;
  /** The prompt characters it counts in its worker's pending prefill until its first token (or its end). */
  private prefill = 0;

  constructor(
    readonly api: ApiName,
    readonly worker: Worker,
    readonly requestId: string,
    readonly rank: number,
    readonly number: number,
    private readonly registry: RequestRegistry,
    readonly model: string,
  ) {
    worker.rankStarted(rank);
  }

  get workerId(): string {
    return this.worker.id;
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get isReleased(): boolean {
    return this.released;
  }

  /** Ends the attempt from outside: its consumer gets `error` as the stream's terminal failure. */
  close(error: StreamError): void {
    if (this.stream && !this.stream.isEnded) this.stream.abort(error, true);
    else if (!this.controller.signal.aborted) this.controller.abort(error);
  }

  /** Abandons the attempt silently (nobody is left to tell): aborts upstream at once. */
  cancel(reason: Error): void {
    if (this.stream && !this.stream.isEnded) this.stream.abort(reason, false);
    else if (!this.controller.signal.aborted) this.controller.abort(reason);
  }

  /**
   * Counts `chars` of prompt (the part its engine's cache likely lacks) in its worker's pending
   * prefill until `prefilled` or `release`.
   */
  prefilling(chars: number): void {
    this.prefill = chars;
    this.worker.addPendingPrefill(chars);
  }

  /** Its first token came (or it ended): its prompt is no longer work ahead on its worker. */
  prefilled(): void {
    if (this.prefill === 0) return;
    this.worker.addPendingPrefill(-this.prefill);
    this.prefill = 0;
  }

  /** Frees the slot; `error` is what ended the attempt, when it did not succeed. */
  release(outcome: AttemptOutcome, error?: Error): void {
    if (this.released) return;
    this.released = true;
    this.prefilled();
    this.span?.end(outcome === 'success' ? undefined : error);
    this.registry.unregister(this.requestId);
    this.worker.rankEnded(this.rank);
    this.worker.limiter.release();
    this.onRelease?.();
    const own = this.worker.breaker;
    const model = this.worker.modelBreaker(this.model);
    if (outcome === 'success') {
      own.recordSuccess();
      model.recordSuccess();
    } else if (outcome === 'model_failure') {
      // The worker answered: its connection is fine; the model's requests are failing on it.
      own.recordSuccess();
      model.recordFailure();
    } else if (outcome === 'worker_failure') {
      own.recordFailure();
      model.release();
    } else {
      own.release();
      model.release();
    }
  }
}
