import type { Dispatcher as UndiciDispatcher } from 'undici';
import type { KindNeeded } from '../config/model-kind.js';
import type { ModelSettings } from '../config/model-settings.js';
import type { SluiceConfig } from '../config/schema.js';
import { isSluiceError, type SluiceError } from '../errors/base.js';
import { ClientDisconnected, NoWorkerAvailable } from '../errors/http-errors.js';
import { ModelNotFound } from '../errors/not-found-errors.js';
import { MaxTokensTooLarge } from '../errors/request-content-errors.js';
import { StreamDeadlineExceeded, StreamIdleTimeout } from '../errors/stream-errors.js';
import {
  UpstreamBadResponse,
  UpstreamHeadersTimeout,
  UpstreamHttpError,
  upstreamStatusError,
} from '../errors/upstream-errors.js';
import { UpstreamBodyTooLarge } from '../errors/upstream-limit-errors.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { RoutingTrace } from '../observability/tracing.js';
import { BufferingSink } from '../streams/buffering-sink.js';
import { EngineStream } from '../streams/engine-stream.js';
import { errorFrameFrom } from '../streams/error-frame.js';
import type { RequestRegistry } from '../streams/request-registry.js';
import type { HealthChecker } from '../workers/health-checker.js';
import type { WorkerRegistry } from '../workers/registry.js';
import type { Worker } from '../workers/worker.js';
import { Attempt } from './attempt.js';
import { classifyRequestError, isUnreachable, outcomeOf } from './classify-upstream-error.js';
import { FallbackChain } from './fallback-chain.js';
import type { FlowControl, FlowTicket } from './flow-control.js';
import { assertKind, servedKinds } from './model-kinds.js';
import { BodyTooLarge, failedFinishOf, readBounded, readLimited } from './read-body.js';
import type { Router } from './router.js';
import type { CompletedResponse, DispatchRequest, OpenedStream, ResumePlan } from './types.js';
import { allReady, WorkerPicker } from './worker-picker.js';

export type { CompletedResponse, DispatchRequest, OpenedStream } from './types.js';

const ERROR_BODY_LIMIT = 64 * 1024;
const _PANIC_LOG_INTERVAL_MS = 10_000;

/**
 * Sends a request to a worker of its model and retries, with backoff and on another worker when
 * one is left, on retryable failures that happen before anything reached the client: connect
 * errors, 429/5xx, a stream that fails before its first output chunk. Every attempt has a fresh
 * upstream request id.
 */
export class Dispatcher {
  constructor(
    private readonly config: SluiceConfig,
    private readonly settings: ModelSettings,
    private readonly registry: WorkerRegistry,
    readonly router: Router,
    private readonly requests: RequestRegistry,
    private readonly health: HealthChecker,
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
    /** Flow control: requests wait here while every worker of a scorer-routed model is saturated. */
    readonly flow?: FlowControl,
  ) {
    this.chain = new FallbackChain(this, settings, metrics, log, config.limits.maxBodyBytes);
    this.picker = new WorkerPicker(router, metrics, log);
  }

  /** A request's models in order (its own, then its fallbacks), and continuing a cut stream on them. */
  private readonly chain: FallbackChain;
  private readonly picker: WorkerPicker;

  knowsModel(model: string): boolean {
    return this.registry.knowsModel(model);
  }

  /**
   * Throws ModelNotFound when no worker serves `model`, and WrongModelKind when the model does
   * not serve requests of `kind` (a generation's, unless told otherwise; see model-kinds.ts).
   */
  assertModel(model: string, kind: KindNeeded = 'chat'): void {
    if (!this.registry.knowsModel(model)) throw new ModelNotFound(model);
    if (kind !== 'any')
      assertKind(model, kind, servedKinds(model, this.settings.kinds(model), this.registry.forModel(model)));
  }

  /** The longest input `model` takes, in tokens: the largest `max_model_len` its workers report (none: undefined). */
  contextLength(model: string): number | undefined {
    let longest = 0;
    for (const worker of this.registry.forModel(model))
      longest = Math.max(longest, worker.maxModelLen.get(model) ?? 0);
    return longest > 0 ? longest : undefined;
  }

  /** A healthy worker of the model, for a utility call that needs one (none: undefined). */
  healthyWorker(model: string): Worker | undefined {
    return this.registry.forModel(model).find((w) => w.healthy);
  }

  /**
   * The most output tokens a request to `model` may ask for: its configured bound
   * (`models.<m>.maxOutputTokens`, else `limits.maxOutputTokens`), lowered to the largest
   * `max_model_len` its workers report, when they report one (no worker could honour more).
   */
  outputTokenLimit(model: string): number {
    let limit = this.settings.maxOutputTokens(model);
    let engine = 0;
    for (const worker of this.registry.forModel(model))
      engine = Math.max(engine, worker.maxModelLen.get(model) ?? 0);
    if (engine > 0) limit = Math.min(limit, engine);
    return limit;
  }

  /** Refuses a request whose `param` asks for more output tokens than its model allows (see outputTokenLimit). */
  assertOutputTokens(model: string, param: string, requested: number | null | undefined): void {
    if (requested === null || requested === undefined) return;
    const limit = this.outputTokenLimit(model);
    if (requested > limit) throw new MaxTokensTooLarge(param, requested, limit);
  }

  /**
   * Opens a stream that has produced its first output chunk: on the request's model, or on its
   * fallbacks when the model cannot answer (FallbackChain).
   */
  openStream(req: DispatchRequest): Promise<OpenedStream> {
    return this.chain.run(req, this.openOne);
  }

  /** Sends a non-streaming request and reads its whole JSON answer, falling back as openStream does. */
  complete(req: DispatchRequest): Promise<CompletedResponse> {
    return this.chain.run(req, this.completeOne);
  }

  openOnModel(req: DispatchRequest): Promise<OpenedStream> {
    return this.openOne(req);
  }

  completeOnModel(req: DispatchRequest): Promise<CompletedResponse> {
    return this.completeOne(req);
  }

  /** Opens a stream on the request's own model (its retries included). */
  private readonly openOne = (req: DispatchRequest): Promise<OpenedStream> => {
    const timeouts = this.settings.timeouts(req.model);
    const itl = this.metrics.folded(this.metrics.interTokenLatency, req.api, req.model);
    return this.withRetries(req, async (attempt) => {
      // Within the request's one budget: a route that would outlast it is not waited for.
      const headersMs = Math.max(1, Math.min(timeouts.headersMs, this.deadlineOf(req) - performance.now()));
      const response = await this.send(req, attempt, headersMs);
      const stream = new EngineStream(response.body, {
        requestId: attempt.requestId,
        idleMs: timeouts.idleMs,
        firstTokenMs: timeouts.firstTokenMs,
        deadlineMs: this.deadlineOf(req) - performance.now(),
        totalDeadlineMs: timeouts.deadlineMs,
        maxEventBytes: this.config.limits.maxEventBytes,
        maxPrefaceBytes: this.config.limits.maxPrefaceBytes,
        abortUpstream: (reason) => attempt.controller.abort(reason),
        gaps: itl,
      });
      attempt.stream = stream;
      const sink = new BufferingSink();
      stream.start(sink);
      // A silent abort (the client went away) ends the stream without telling the sink.
      await sink.whenReady(attempt.signal);
      if (attempt.signal.aborted && sink.outputChunks === 0) {
        throw classifyRequestError(attempt.signal.reason, attempt.signal, attempt.worker.id, 0);
      }
      const early = sink.earlyFailure;
      if (early) throw early;
      attempt.span?.firstToken();
      return { attempt, stream, sink, timeouts };
    });
  };

  /**
   * How a stream of `req` may be continued after a cut mid-stream (FallbackChain.resumePlan), or
   * undefined when it may not.
   */
  resumePlan(
    req: DispatchRequest,
    body: Record<string, unknown>,
    override: boolean | undefined,
  ): ResumePlan | undefined {
    return this.chain.resumePlan(req, body, override);
  }

  /** Sends a non-streaming request on the request's own model and reads its whole JSON answer. */
  private readonly completeOne = (req: DispatchRequest): Promise<CompletedResponse> => {
    const timeouts = this.settings.timeouts(req.model);
    return this.withRetries(req, async (attempt) => {
      // A non-streaming engine answers its headers only when generation is done: the deadline bounds it.
      const remaining = Math.max(1, this.deadlineOf(req) - performance.now());
      const deadline = setTimeout(
        () => attempt.controller.abort(new StreamDeadlineExceeded(attempt.requestId, timeouts.deadlineMs)),
        remaining,
      );
      try {
        const response = await this.send(req, attempt, remaining);
        const limit = this.config.limits.maxBodyBytes;
        let body: Buffer;
        try {
          body = await readBounded(response, limit);
        } catch (err) {
          if (err instanceof BodyTooLarge) {
            const error = new UpstreamBodyTooLarge(attempt.requestId, limit);
            attempt.controller.abort(error);
            throw error;
          }
          throw classifyRequestError(err, attempt.signal, attempt.worker.id, remaining);
        }
        let json: unknown;
        try {
          json = JSON.parse(body.toString('utf8'));
        } catch {
          throw new UpstreamBadResponse(attempt.worker.id, 'the body is not JSON');
        }
        if (typeof json !== 'object' || json === null || Array.isArray(json)) {
          throw new UpstreamBadResponse(attempt.worker.id, 'the body is not a JSON object');
        }
        const frame = errorFrameFrom(json);
        if (frame) throw frame;
        const failedFinish = failedFinishOf(json as Record<string, unknown>, attempt.requestId);
        if (failedFinish) throw failedFinish;
        const contentType = String(response.headers['content-type'] ?? 'application/json');
        attempt.release('success');
        return {
          attempt,
          status: response.statusCode,
          contentType,
          body,
          json: json as Record<string, unknown>,
        };
      } finally {
        clearTimeout(deadline);
      }
    });
  };

  private async withRetries<T extends { attempt: Attempt }>(
    req: DispatchRequest,
    run: (attempt: Attempt) => Promise<T>,
  ): Promise<T> {
    // Its kind was checked by its front (a retry of an embeddings request is not a chat request).
    this.assertModel(req.model, 'any');
    const { maxAttempts, backoffMs, maxBackoffMs } = this.config.retry;
    const deadlineAt = this.deadlineOf(req);
    /** Workers that failed this request's earlier attempts (made at the first failure). */
    let tried: Set<string> | undefined;
    /** Workers that did not answer in time: never tried again for this request. */
    let silent: Set<string> | undefined;
    let lastError: SluiceError | undefined;
    /** The wait an engine asked for before the same route is tried again (its Retry-After). */
    let asked = 0;
    for (let n = 0; n < maxAttempts; n++) {
      if (n > 0) {
        const backoff = Math.min(maxBackoffMs, backoffMs * 2 ** (n - 1)) * (0.5 + Math.random() / 2);
        const delay = Math.max(backoff, asked);
        if (performance.now() + delay >= deadlineAt) break;
        await sleep(delay, req.signal);
      }
      if (req.signal.aborted) throw new ClientDisconnected();
      let attempt: Attempt;
      const routing = req.trace?.startRouting(this.settings.policy(req.model), n);
      try {
        const acquired = this.acquire(req, tried, silent, n, routing);
        attempt = acquired instanceof Attempt ? acquired : await acquired;
      } catch (err) {
        routing?.end(err);
        // After a failed attempt, "no other worker" is less telling than what went wrong.
        if (lastError && err instanceof NoWorkerAvailable) throw lastError;
        throw err;
      }
      if (req.trace) {
        routing?.end();
        attempt.span = req.trace.startAttempt({
          workerId: attempt.worker.id,
          workerUrl: attempt.worker.url,
          path: req.path,
          requestId: attempt.requestId,
          retry: n,
          rank: attempt.rank,
        });
      }
      const onClientGone = () => attempt.cancel(new ClientDisconnected());
      req.signal.addEventListener('abort', onClientGone, { once: true });
      try {
        const result = await run(attempt);
        this.metrics.upstreamAttempts.inc({ worker: attempt.worker.id, outcome: 'ok' });
        return result;
      } catch (raw) {
        const err = isSluiceError(raw)
          ? raw
          : classifyRequestError(raw, attempt.signal, attempt.worker.id, 0);
        attempt.cancel(err);
        attempt.release(outcomeOf(err), err);
        this.metrics.upstreamAttempts.inc({ worker: attempt.worker.id, outcome: err.code });
        if (isUnreachable(err)) this.health.reportUnreachable(attempt.worker, err.message);
        // What leaves the dispatcher may reach the client: no internal host:port in it.
        attempt.worker.redactError(err);
        if (!err.retryable || req.signal.aborted) throw err;
        tried ??= new Set();
        tried.add(attempt.worker.id);
        lastError = err;
        // A route that did not answer in time is not tried again: another worker, or the next model.
        if (err instanceof UpstreamHeadersTimeout || err instanceof StreamIdleTimeout) {
          silent ??= new Set();
          silent.add(attempt.worker.id);
        }
        // An engine that asks to be left alone for longer than the bound is: the request moves on
        // (to its next model, or ends with the engine's 429/503) rather than burst on it.
        asked = 0;
        const retryAfter = err instanceof UpstreamHttpError ? err.retryAfter : undefined;
        if (retryAfter !== undefined) {
          const ms = retryAfter * 1000;
          if (ms > this.config.retry.maxRetryAfterMs) throw err;
          // Only the same route waits: with an untried worker of the model left, it goes there at once.
          if (this.everyWorkerTried(req.model, tried)) asked = ms;
        }
        if (n + 1 < maxAttempts) {
          this.metrics.retries.inc({ model: this.metrics.modelLabel(req.model), code: err.code });
          this.log.warn(
            {
              requestId: req.requestId,
              upstreamRequestId: attempt.requestId,
              worker: attempt.worker.id,
              code: err.code,
            },
            'upstream attempt failed before the first byte; retrying',
          );
        }
      } finally {
        req.signal.removeEventListener('abort', onClientGone);
      }
    }
    throw lastError ?? new NoWorkerAvailable(req.model);
  }

  /** When the request's one budget ends: set by the fallback chain, else its model's deadline. */
  private deadlineOf(req: DispatchRequest): number {
    return req.deadlineAt ?? req.receivedAt + this.settings.timeouts(req.model).deadlineMs;
  }

  /** Whether every worker of the model has failed this request already (a retry goes back to one). */
  private everyWorkerTried(model: string, tried: ReadonlySet<string>): boolean {
    return this.registry.forModel(model).every((w) => tried.has(w.id));
  }

  /**
   * Picks a worker, waits for a slot on it, and registers a new attempt with a fresh request id.
   * With a slot free at once (the usual case) the attempt is returned as it is, not in a promise.
   */
  private acquire(
    req: DispatchRequest,
    tried: ReadonlySet<string> | undefined,
    silent: ReadonlySet<string> | undefined,
    n: number,
    routing: RoutingTrace | undefined,
  ): Attempt | Promise<Attempt> {
    // A first attempt waits in the gateway while every worker it could go to is saturated.
    const flow = this.flow;
    if (n === 0 && flow && this.router.judgesSaturation(req.model)) {
      const ticket = this.ticketOf(req);
      const waiting = flow.enter(req.model, ticket, req.signal, () =>
        this.picker.fleetSaturated(req, this.registry.forModel(req.model)),
      );
      if (waiting)
        return waiting.then((ms) => {
          routing?.waited(ms, flow.options.classes[ticket.priority] ?? String(ticket.priority));
          return this.pickAndAcquire(req, tried, silent, n, routing);
        });
    }
    return this.pickAndAcquire(req, tried, silent, n, routing);
  }

  /** The request's flow ticket, its queue deadline within what is left of its one budget. */
  private ticketOf(req: DispatchRequest): FlowTicket {
    const options = this.flow!.options;
    const ticket = req.flow ?? {
      tenant: '',
      priority: options.defaultPriority,
      maxWaitMs: options.maxWaitMs,
    };
    const left = Math.max(1, Math.floor(this.deadlineOf(req) - performance.now()));
    return left < ticket.maxWaitMs ? { ...ticket, maxWaitMs: left } : ticket;
  }

  private pickAndAcquire(
    req: DispatchRequest,
    tried: ReadonlySet<string> | undefined,
    silent: ReadonlySet<string> | undefined,
    n: number,
    routing: RoutingTrace | undefined,
  ): Attempt | Promise<Attempt> {
    const serving = this.registry.forModel(req.model);
    // The usual case first: a first attempt with nothing excluded, every worker of the model
    // healthy, admitting and with a free slot; the filters below would keep all of them.
    const allFree =
      tried === undefined &&
      req.exclude === undefined &&
      req.rank === undefined &&
      allReady(serving, req.model);
    const { worker, panic } = allFree
      ? { worker: this.picker.pickFrom(req, serving, routing), panic: false }
      : this.picker.pick(req, serving, tried, silent, routing);
    const rank = worker.chooseRank(req.rank);
    if (worker.limiter.tryAcquire()) return this.admit(req, worker, rank, panic, n);
    return this.waitForSlot(req, worker).then(() => this.admit(req, worker, rank, panic, n));
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
  private admit(req: DispatchRequest, worker: Worker, rank: number, panic: boolean, n: number): Attempt {
    const admitted = panic || this.picker.tryAdmit(worker, req.model);
    if (!admitted) {
      worker.limiter.release();
      throw new NoWorkerAvailable(req.model, 1, 'circuit open');
    }
    const requestId = n === 0 ? req.requestId : `${req.requestId}-retry${n}`;
    const attempt = new Attempt(req.api, worker, requestId, rank, n, this.requests, req.model);
    if (this.flow && this.router.judgesSaturation(req.model))
      attempt.onRelease = this.flow.started(req.model, req.flow?.tenant ?? '');
    try {
      this.requests.register(attempt);
    } catch (err) {
      attempt.release('neutral');
      throw err;
    }
    return attempt;
  }

  private async send(
    req: DispatchRequest,
    attempt: Attempt,
    headersTimeoutMs: number,
  ): Promise<UndiciDispatcher.ResponseData> {
    const { worker } = attempt;
    const headers: Record<string, string> = {
      ...req.headers,
      'content-type': 'application/json',
      accept: req.stream ? 'text/event-stream' : 'application/json',
      'x-request-id': attempt.requestId,
    };
    if (worker.apiKey) headers.authorization = `Bearer ${worker.apiKey}`;
    if (worker.dpSize > 1 || req.rank !== undefined) headers['x-data-parallel-rank'] = String(attempt.rank);
    // The gateway's own attempt span is the worker's parent, in place of the client's traceparent.
    attempt.span?.inject(headers);
    let response: UndiciDispatcher.ResponseData;
    try {
      response = await worker.pool.request({
        method: 'POST',
        path: worker.basePath + req.path,
        headers,
        body: req.payload,
        signal: attempt.signal,
        headersTimeout: headersTimeoutMs,
        bodyTimeout: 0,
      });
    } catch (err) {
      throw classifyRequestError(err, attempt.signal, worker.id, headersTimeoutMs);
    }
    attempt.span?.responded(response.statusCode);
    // Only a 200 is an answer: a 201 or a 3xx taken as success would hand the client an error body.
    if (response.statusCode !== 200) {
      const body = await readLimited(response.body, ERROR_BODY_LIMIT);
      throw upstreamStatusError(worker.id, response.statusCode, body, response.headers);
    }
    return response;
  }
}

/** Whether every one of `workers` (at least one) is healthy, admits `model` and has a free slot. */

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
