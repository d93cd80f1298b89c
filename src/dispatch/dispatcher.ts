import type { Dispatcher as UndiciDispatcher } from 'undici';
import type { KindNeeded } from '../config/model-kind.js';
import type { ModelSettings } from '../config/model-settings.js';
import type { SluiceConfig } from '../config/schema.js';
import { isSluiceError, type SluiceError } from '../errors/base.js';
import {
  ClientDisconnected,
  MaxTokensTooLarge,
  ModelNotFound,
  NoWorkerAvailable,
  QueueFull,
} from '../errors/http-errors.js';
import {
  InvalidDataParallelRank,
  StreamDeadlineExceeded,
  UpstreamLimitExceeded,
} from '../errors/stream-errors.js';
import { UpstreamBadResponse, upstreamStatusError } from '../errors/upstream-errors.js';
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
import { continuationBody } from './continuation.js';
import { assertKind, servedKinds } from './model-kinds.js';
import { BodyTooLarge, failedFinishOf, readBounded, readLimited } from './read-body.js';
import type { Router } from './router.js';
import type { CompletedResponse, DispatchRequest, OpenedStream, ResumePlan } from './types.js';

export type { CompletedResponse, DispatchRequest, OpenedStream } from './types.js';

const ERROR_BODY_LIMIT = 64 * 1024;
const PANIC_LOG_INTERVAL_MS = 10_000;

/**
 * Sends a request to a worker of its model and retries, with backoff and on another worker when
 * one is left, on retryable failures that happen before anything reached the client: connect
 * errors, 429/5xx, a stream that fails before its first output chunk. Every attempt has a fresh
 * upstream request id.
 */
export class Dispatcher {
  private readonly panicLoggedAt = new Map<string, number>();

  constructor(
    private readonly config: SluiceConfig,
    private readonly settings: ModelSettings,
    private readonly registry: WorkerRegistry,
    private readonly router: Router,
    private readonly requests: RequestRegistry,
    private readonly health: HealthChecker,
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
  ) {}

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

  /**
   * The most output tokens a request to `model` may ask for: its configured bound
   * (`models.<m>.maxOutputTokens`, else `limits.maxOutputTokens`), lowered to the largest
   * `max_model_len` its workers report, when they report one (no worker could honour more).
   */
  /** A healthy worker of the model, for a utility call that needs one (none: undefined). */
  healthyWorker(model: string): Worker | undefined {
    return this.registry.forModel(model).find((w) => w.healthy);
  }

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

  /** Opens a stream that has produced its first output chunk. */
  openStream(req: DispatchRequest): Promise<OpenedStream> {
    const timeouts = this.settings.timeouts(req.model);
    const itl = this.metrics.folded(this.metrics.interTokenLatency, req.api, req.model);
    return this.withRetries(req, async (attempt) => {
      const response = await this.send(req, attempt, timeouts.headersMs);
      const stream = new EngineStream(response.body, {
        requestId: attempt.requestId,
        idleMs: timeouts.idleMs,
        deadlineMs: timeouts.deadlineMs - (performance.now() - req.receivedAt),
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
  }

  /**
   * How a stream of `req` may be resumed mid-stream, or undefined when resume is off for it:
   * the model's `resume` setting, overridden either way by the request's `X-Sluice-Resume`.
   */
  resumePlan(
    req: DispatchRequest,
    body: Record<string, unknown>,
    override: boolean | undefined,
  ): ResumePlan | undefined {
    const settings = this.settings.resume(req.model);
    if (!(override ?? settings.enabled)) return undefined;
    const resumes = this.metrics.streamResumes;
    const model = this.metrics.modelLabel(req.model);
    return {
      maxAttempts: settings.maxAttempts,
      maxTextLength: this.config.limits.maxBodyBytes,
      requestId: req.requestId,
      log: this.log,
      count: (outcome) => resumes.inc({ model, outcome }),
      open: (continuation) => {
        const next = continuationBody(req.api, body, continuation);
        if (!next) return Promise.reject(new NoWorkerAvailable(req.model, 1, 'no continuation can be built'));
        return this.openStream({
          ...req,
          payload: JSON.stringify(next),
          requestId: `${req.requestId}-resume${continuation.number}`,
          exclude: continuation.exclude,
        });
      },
    };
  }

  /** Sends a non-streaming request and reads its whole JSON answer. */
  complete(req: DispatchRequest): Promise<CompletedResponse> {
    const timeouts = this.settings.timeouts(req.model);
    return this.withRetries(req, async (attempt) => {
      // A non-streaming engine answers its headers only when generation is done: the deadline bounds it.
      const remaining = Math.max(1, timeouts.deadlineMs - (performance.now() - req.receivedAt));
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
            const error = new UpstreamLimitExceeded(attempt.requestId, 'body', limit);
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
  }

  private async withRetries<T extends { attempt: Attempt }>(
    req: DispatchRequest,
    run: (attempt: Attempt) => Promise<T>,
  ): Promise<T> {
    // Its kind was checked by its front (a retry of an embeddings request is not a chat request).
    this.assertModel(req.model, 'any');
    const { maxAttempts, backoffMs, maxBackoffMs } = this.config.retry;
    const deadlineAt = req.receivedAt + this.settings.timeouts(req.model).deadlineMs;
    /** Workers that failed this request's earlier attempts (made at the first failure). */
    let tried: Set<string> | undefined;
    let lastError: SluiceError | undefined;
    for (let n = 0; n < maxAttempts; n++) {
      if (n > 0) {
        const delay = Math.min(maxBackoffMs, backoffMs * 2 ** (n - 1)) * (0.5 + Math.random() / 2);
        if (performance.now() + delay >= deadlineAt) break;
        await sleep(delay, req.signal);
      }
      if (req.signal.aborted) throw new ClientDisconnected();
      let attempt: Attempt;
      const routing = req.trace?.startRouting(this.settings.policy(req.model), n);
      try {
        const acquired = this.acquire(req, tried, n, routing);
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

  /**
   * Picks a worker, waits for a slot on it, and registers a new attempt with a fresh request id.
   * With a slot free at once (the usual case) the attempt is returned as it is, not in a promise.
   */
  private acquire(
    req: DispatchRequest,
    tried: ReadonlySet<string> | undefined,
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
      ? { worker: this.pickFrom(req, serving, routing), panic: false }
      : this.pick(req, serving, tried, routing);
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
    const admitted = panic || this.tryAdmit(worker, req.model);
    if (!admitted) {
      worker.limiter.release();
      throw new NoWorkerAvailable(req.model, 1, 'circuit open');
    }
    const requestId = n === 0 ? req.requestId : `${req.requestId}-retry${n}`;
    const attempt = new Attempt(req.api, worker, requestId, rank, n, this.requests, req.model);
    try {
      this.requests.register(attempt);
    } catch (err) {
      attempt.release('neutral');
      throw err;
    }
    return attempt;
  }

  /** Picks a worker through the health, circuit, queue and retry filters (see acquire). */
  private pick(
    req: DispatchRequest,
    serving: readonly Worker[],
    tried: ReadonlySet<string> | undefined,
    routing: RoutingTrace | undefined,
  ): { worker: Worker; panic: boolean } {
    const exclude = req.exclude;
    const all = this.withRank(exclude ? serving.filter((w) => !exclude.has(w.id)) : serving, req.rank);
    const healthy = all.filter((w) => w.healthy);
    let admitting = healthy.filter((w) => w.admits(req.model));
    // Panic mode: the circuits never cause a total outage; with every healthy worker of the model
    // ejected, the request goes to them anyway.
    const panic = admitting.length === 0 && healthy.length > 0;
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
    return { worker: this.pickFrom(req, free.length > 0 ? free : candidates, routing), panic };
  }

  private pickFrom(
    req: DispatchRequest,
    candidates: readonly Worker[],
    routing: RoutingTrace | undefined,
  ): Worker {
    const worker = this.router.pick(req.model, candidates, req.route);
    routing?.picked(worker.id, candidates.length);
    return worker;
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
    const now = Date.now();
    if ((this.panicLoggedAt.get(model) ?? 0) + PANIC_LOG_INTERVAL_MS > now) return;
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
function allReady(workers: readonly Worker[], model: string): boolean {
  if (workers.length === 0) return false;
  for (const w of workers) if (!w.healthy || !w.admits(model) || !w.limiter.hasFreeSlot) return false;
  return true;
}

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
