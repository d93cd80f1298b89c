import type { Dispatcher as UndiciDispatcher } from 'undici';
import type { ModelProfile } from '../config/model-settings.js';
import type { SluiceConfig } from '../config/schema.js';
import { isSluiceError, type SluiceError } from '../errors/base.js';
import { ClientDisconnected, NoWorkerAvailable } from '../errors/http-errors.js';
import { StreamDeadlineExceeded, StreamIdleTimeout } from '../errors/stream-errors.js';
import {
  UpstreamBadResponse,
  UpstreamHeadersTimeout,
  UpstreamHttpError,
  upstreamStatusError,
} from '../errors/upstream-errors.js';
import { GatewayMemoryFull, UpstreamBodyTooLarge } from '../errors/upstream-limit-errors.js';
import type { HeldBytes } from '../memory/held-bytes.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { RoutingRecord } from '../observability/tracing.js';
import { BufferingSink } from '../streams/buffering-sink.js';
import { EngineStream } from '../streams/engine-stream.js';
import { errorFrameFrom } from '../streams/error-frame.js';
import type { HealthChecker } from '../workers/health-checker.js';
import { Attempt } from './attempt.js';
import { classifyRequestError, isUnreachable, outcomeOf } from './classify-upstream-error.js';
import { withPriority } from './engine-priority.js';
import { BodyTooLarge, failedFinishOf, HeldFull, readBounded, readLimited } from './read-body.js';
import { backoffMs, REAL_TIMING, type RetryTiming } from './retry-backoff.js';
import type { AttemptShare, CompletedResponse, DispatchRequest, OpenedStream } from './types.js';
import type { WorkerPicker } from './worker-picker.js';

const ERROR_BODY_LIMIT = 64 * 1024;

/** When a request's one budget ends: set by the fallback chain, else its model's deadline from its arrival. */
export function deadlineOf(req: DispatchRequest, profile: ModelProfile): number {
  return req.deadlineAt ?? req.receivedAt + profile.timeouts.deadlineMs;
}

/**
 * One model's attempts at a request: sends it to a worker of the model and retries on retryable
 * failures that happen before anything reached the client (connect errors, 429/5xx, a stream that
 * fails before its first output chunk): at once on a worker not tried yet, else after a jittered
 * exponential backoff (retry-backoff.ts) or the engine's Retry-After, whichever is longer, always
 * within the request's one budget. Every attempt has a fresh upstream request id. The request's
 * model settings come resolved (its profile): nothing here looks them up again.
 */
export class AttemptLoop {
  constructor(
    private readonly config: SluiceConfig,
    private readonly picker: WorkerPicker,
    private readonly health: HealthChecker,
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
    /** What all requests together hold (`limits.maxHeldBytes`): a body being read takes from it. */
    private readonly held?: HeldBytes | undefined,
    /** The random source and the sleep of the waits between attempts. */
    private readonly timing: RetryTiming = REAL_TIMING,
  ) {}

  /**
   * Opens a stream on the request's own model that has produced its first output chunk, in at
   * most `share`'s attempts.
   */
  openOnModel(req: DispatchRequest, profile: ModelProfile, share: AttemptShare): Promise<OpenedStream> {
    const timeouts = profile.timeouts;
    const deadlineAt = deadlineOf(req, profile);
    const itl = this.metrics.folded(this.metrics.interTokenLatency, req.api, req.model);
    return this.withRetries(req, profile, deadlineAt, share, async (attempt) => {
      // Within the request's one budget: a route that would outlast it is not waited for. undici
      // checks its headers timeout on a coarse timer (up to half a second late): the budget's own
      // end aborts the attempt on time, typed.
      const remaining = Math.max(1, deadlineAt - performance.now());
      const deadline = setTimeout(
        () => attempt.controller.abort(new StreamDeadlineExceeded(attempt.requestId, timeouts.deadlineMs)),
        remaining,
      );
      let response: UndiciDispatcher.ResponseData;
      try {
        response = await this.send(req, attempt, Math.min(timeouts.headersMs, remaining));
      } finally {
        clearTimeout(deadline);
      }
      const stream = new EngineStream(response.body, {
        requestId: attempt.requestId,
        idleMs: timeouts.idleMs,
        firstTokenMs: timeouts.firstTokenMs,
        deadlineMs: deadlineAt - performance.now(),
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
      attempt.prefilled();
      attempt.span?.firstToken();
      return { attempt, stream, sink, timeouts };
    });
  }

  /** Sends a non-streaming request on the request's own model and reads its whole JSON answer (`share` as openOnModel). */
  completeOnModel(
    req: DispatchRequest,
    profile: ModelProfile,
    share: AttemptShare,
  ): Promise<CompletedResponse> {
    const timeouts = profile.timeouts;
    const deadlineAt = deadlineOf(req, profile);
    return this.withRetries(req, profile, deadlineAt, share, async (attempt) => {
      // A non-streaming engine answers its headers only when generation is done: the deadline bounds it.
      const remaining = Math.max(1, deadlineAt - performance.now());
      const deadline = setTimeout(
        () => attempt.controller.abort(new StreamDeadlineExceeded(attempt.requestId, timeouts.deadlineMs)),
        remaining,
      );
      let whole: NodeJS.Timeout | undefined;
      try {
        const response = await this.send(req, attempt, remaining);
        // The answer is one unit: its bytes are not progress (as an unfinished line of a stream is
        // not), so it must be whole within idleMs of its headers, or the engine is let go.
        whole = setTimeout(
          () => attempt.controller.abort(new StreamIdleTimeout(attempt.requestId, timeouts.idleMs, 'body')),
          timeouts.idleMs,
        );
        const json = await this.readWhole(response, attempt, remaining);
        attempt.release('success');
        return {
          attempt,
          status: response.statusCode,
          contentType: String(response.headers['content-type'] ?? 'application/json'),
          body: json.body,
          json: json.value,
        };
      } finally {
        clearTimeout(deadline);
        clearTimeout(whole);
      }
    });
  }

  /** Reads an engine's whole answer: bounded, a JSON object, and neither an error frame nor a failed finish. */
  private async readWhole(
    response: UndiciDispatcher.ResponseData,
    attempt: Attempt,
    remaining: number,
  ): Promise<{ body: Buffer; value: Record<string, unknown> }> {
    const limit = this.config.limits.maxBodyBytes;
    // Held while it is read (the body's bytes); what is made of it then is the front's.
    const hold = this.held?.hold();
    let body: Buffer;
    try {
      body = await readBounded(response, limit, hold);
    } catch (err) {
      if (err instanceof BodyTooLarge || err instanceof HeldFull) {
        const error =
          err instanceof HeldFull
            ? new GatewayMemoryFull(attempt.requestId, hold?.bytes ?? 0)
            : new UpstreamBodyTooLarge(attempt.requestId, limit);
        attempt.controller.abort(error);
        throw error;
      }
      throw classifyRequestError(err, attempt.signal, attempt.worker.id, remaining);
    } finally {
      hold?.release();
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
    const value = json as Record<string, unknown>;
    const failedFinish = failedFinishOf(value, attempt.requestId);
    if (failedFinish) throw failedFinish;
    return { body, value };
  }

  private async withRetries<T extends { attempt: Attempt }>(
    req: DispatchRequest,
    profile: ModelProfile,
    deadlineAt: number,
    share: AttemptShare,
    run: (attempt: Attempt) => Promise<T>,
  ): Promise<T> {
    const retry = this.config.retry;
    // The model's own retries, within its share of the chain's attempts.
    const maxAttempts = Math.min(retry.maxAttempts, share.max);
    const chain = share.chain;
    /** Workers that failed this request's earlier attempts (made at the first failure). */
    let tried: Set<string> | undefined;
    /** Workers that did not answer in time: never tried again for this request. */
    let silent: Set<string> | undefined;
    let lastError: SluiceError | undefined;
    /** The wait before the next attempt: none when it goes to a worker not tried yet. */
    let wait = 0;
    /** Waits made before going back to a route already tried (the backoff's exponent). */
    let backoffs = 0;
    for (let n = 0; n < maxAttempts && chain.left > 0; n++) {
      if (wait > 0) {
        // A wait that would outlast the request's one budget is not made: the model's last
        // failure answers (the chain may still move on to its next model at once).
        if (performance.now() + wait >= deadlineAt) break;
        await this.timing.sleep(wait, req.signal);
      }
      if (req.signal.aborted) throw new ClientDisconnected();
      const routed: RoutingRecord | undefined = req.trace && {
        policy: profile.policy,
        retry: n,
        startedAt: performance.now(),
      };
      let attempt: Attempt;
      try {
        const acquired = this.picker.acquire(req, { number: n, deadlineAt, tried, silent, routed });
        attempt = acquired instanceof Attempt ? acquired : await acquired;
        chain.left--;
      } catch (err) {
        if (routed) req.trace?.routingFailed(routed, err);
        // After a failed attempt, "no other worker" is less telling than what went wrong.
        if (lastError && err instanceof NoWorkerAvailable) throw lastError;
        throw err;
      }
      if (routed)
        attempt.span = req.trace?.routed(routed, {
          workerId: attempt.worker.id,
          workerUrl: attempt.worker.url,
          path: req.path,
          requestId: attempt.requestId,
          retry: n,
          rank: attempt.rank,
        });
      const onClientGone = () => attempt.cancel(new ClientDisconnected());
      req.signal.addEventListener('abort', onClientGone, { once: true });
      try {
        const result = await run(attempt);
        this.metrics.upstreamAttempts.inc({ worker: attempt.worker.id, outcome: 'ok' });
        return result;
      } catch (raw) {
        const err = this.failed(attempt, raw);
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
        const retryAfter = err instanceof UpstreamHttpError ? err.retryAfter : undefined;
        const asked = retryAfter === undefined ? 0 : retryAfter * 1000;
        if (asked > retry.maxRetryAfterMs) throw err;
        if (n + 1 >= maxAttempts || chain.left <= 0) continue;
        // Every route silent: none is left to wait for (the chain moves on at once).
        if (silent && this.picker.everyWorkerTried(req.model, silent)) break;
        // Only the same route waits: with an untried worker of the model left, it goes there at
        // once; back on a route already tried, the backoff or the engine's Retry-After, the longer.
        wait = this.picker.everyWorkerTried(req.model, tried)
          ? Math.max(asked, backoffMs(backoffs++, retry.backoffMs, retry.maxBackoffMs, this.timing.random))
          : 0;
        this.noteRetry(req, attempt, err);
      } finally {
        req.signal.removeEventListener('abort', onClientGone);
      }
    }
    throw lastError ?? new NoWorkerAvailable(req.model);
  }

  /**
   * Ends an attempt that failed: aborts it, frees its slot with the outcome its circuits count,
   * counts it, tells the health checker of a worker that could not be reached, and takes the
   * worker's address out of the error (what leaves here may reach the client).
   */
  private failed(attempt: Attempt, raw: unknown): SluiceError {
    const err = isSluiceError(raw) ? raw : classifyRequestError(raw, attempt.signal, attempt.worker.id, 0);
    attempt.cancel(err);
    attempt.release(outcomeOf(err), err);
    this.metrics.upstreamAttempts.inc({ worker: attempt.worker.id, outcome: err.code });
    if (isUnreachable(err)) this.health.reportUnreachable(attempt.worker, err.message);
    attempt.worker.redactError(err);
    return err;
  }

  private noteRetry(req: DispatchRequest, attempt: Attempt, err: SluiceError): void {
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
        body:
          attempt.enginePriority === undefined
            ? req.payload
            : withPriority(req.payload, attempt.enginePriority),
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
