import type { ModelProfile, ModelSettings } from '../config/model-settings.js';
import type { SluiceConfig } from '../config/schema.js';
import { isSluiceError } from '../errors/base.js';
import { NoWorkerAvailable } from '../errors/http-errors.js';
import { PrefillRejected } from '../errors/upstream-errors.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { WorkerRegistry } from '../workers/registry.js';
import { type AttemptLoop, deadlineOf } from './attempt-loop.js';
import { continuationBody, unsafeToContinue } from './continuation.js';
import { type FallbackReason, fallbackReason, retargetPayload } from './fallback.js';
import { PrefillMemory } from './prefill-memory.js';
import type {
  AttemptShare,
  CompletedResponse,
  Continuation,
  DispatchRequest,
  OpenedStream,
  ResumePlan,
} from './types.js';

/**
 * A request's models, in order: its own, then its fallbacks (the request's `fallbacks`, else its
 * model's configured ones less those the caller's key may not use; each model once; a
 * fallback's own fallbacks are not followed). One count of engine attempts bounds the whole
 * chain (`retry.maxChainAttempts`), each model making at most its `retry.maxAttempts` and
 * leaving one for each model after it while the count lasts. Before the first byte,
 * a failure that moves on (fallback.ts) sends the request to the next model at once, within the
 * one budget of the request (`timeouts.deadlineMs` of its own model, from its arrival). After the
 * first byte, a stream that no worker of its model can resume is continued on the next model
 * that accepts an assistant prefill, from the text so far (resumePlan).
 */
export class FallbackChain {
  constructor(
    private readonly attempts: AttemptLoop,
    private readonly retry: SluiceConfig['retry'],
    private readonly registry: WorkerRegistry,
    private readonly settings: ModelSettings,
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
    /** The longest text kept for a continuation (`limits.maxBodyBytes`). */
    private readonly maxTextLength: number,
  ) {
    this.prefill = new PrefillMemory(settings);
  }

  /** The models that accept an assistant prefill: configured, and learnt from their engines' 400s. */
  private readonly prefill: PrefillMemory;

  /**
   * The models after the request's own it may move to: those it named (admitted already), else
   * its model's configured ones that its key may use; each once, never its own model again.
   */
  rest(request: DispatchRequest): readonly string[] {
    const listed = request.fallbacks ?? this.settings.fallbacks(request.model);
    if (listed.length === 0) return listed;
    const mayUse = request.mayUse;
    const seen = new Set([request.model]);
    const rest: string[] = [];
    for (const model of listed) {
      if (seen.has(model) || (mayUse !== undefined && !mayUse(model))) continue;
      seen.add(model);
      rest.push(model);
    }
    return rest;
  }

  /** Opens a stream on the request's model, then on each fallback while its failures move on. */
  open(request: DispatchRequest): Promise<OpenedStream> {
    const profile = this.settings.of(request.model);
    const rest = this.rest(request);
    // The usual case, without an async frame of its own: a model without fallbacks.
    if (rest.length === 0) return this.attempts.openOnModel(request, profile, this.alone());
    return this.walk(request, profile, rest, 'open');
  }

  /** Sends a non-streaming request and reads its whole answer, falling back as `open` does. */
  complete(request: DispatchRequest): Promise<CompletedResponse> {
    const profile = this.settings.of(request.model);
    const rest = this.rest(request);
    if (rest.length === 0) return this.attempts.completeOnModel(request, profile, this.alone());
    return this.walk(request, profile, rest, 'complete');
  }

  /** The attempts of a model with nothing after it: the chain's whole count. */
  private alone(): AttemptShare {
    const left = this.retry.maxChainAttempts;
    return { max: left, chain: { left } };
  }

  /**
   * A model's share of what the chain has left: all of it but one attempt for each model after
   * it that some worker serves (at least one while any is left).
   */
  private share(chain: { left: number }, after: readonly string[]): AttemptShare {
    let later = 0;
    for (const model of after) if (this.registry.knowsModel(model)) later++;
    return { max: Math.max(1, chain.left - later), chain };
  }

  private walk(
    request: DispatchRequest,
    profile: ModelProfile,
    rest: readonly string[],
    how: 'open',
  ): Promise<OpenedStream>;
  private walk(
    request: DispatchRequest,
    profile: ModelProfile,
    rest: readonly string[],
    how: 'complete',
  ): Promise<CompletedResponse>;
  private async walk(
    request: DispatchRequest,
    profile: ModelProfile,
    rest: readonly string[],
    how: 'open' | 'complete',
  ): Promise<OpenedStream | CompletedResponse> {
    const deadlineAt = deadlineOf(request, profile);
    let current: DispatchRequest = { ...request, fallbacks: rest, deadlineAt };
    let settings = profile;
    const chain = { left: this.retry.maxChainAttempts };
    for (let hop = 1; ; hop++) {
      const share = this.share(chain, current.fallbacks ?? []);
      try {
        return how === 'open'
          ? await this.attempts.openOnModel(current, settings, share)
          : await this.attempts.completeOnModel(current, settings, share);
      } catch (raw) {
        if (!isSluiceError(raw)) throw raw;
        const next = this.nextKnown(current.fallbacks ?? []);
        const reason = next === undefined ? undefined : fallbackReason(raw);
        if (next === undefined || reason === undefined) throw raw;
        // The chain's attempts spent, or its one budget: the last failure is the answer.
        if (chain.left <= 0) throw raw;
        if (request.signal.aborted || performance.now() >= deadlineAt) throw raw;
        this.note(request, current.model, next.model, reason, raw.code);
        current = {
          ...current,
          model: next.model,
          payload: retargetPayload(current.payload, next.model),
          requestId: `${request.requestId}-fallback${hop}`,
          fallbacks: next.after,
        };
        settings = this.settings.of(next.model);
      }
    }
  }

  /** The first of `models` some worker serves, and those after it; skips the others. */
  private nextKnown(models: readonly string[]): { model: string; after: readonly string[] } | undefined {
    for (let i = 0; i < models.length; i++)
      if (this.registry.knowsModel(models[i]!)) return { model: models[i]!, after: models.slice(i + 1) };
    return undefined;
  }

  /** Counts and logs a move to the next model (a bounded metric: only models served get their name). */
  private note(
    request: DispatchRequest,
    from: string,
    to: string,
    reason: FallbackReason,
    code: string,
  ): void {
    this.metrics.fallbacks.inc({
      from: this.metrics.modelLabel(from),
      to: this.metrics.modelLabel(to),
      reason,
    });
    this.log.warn({ requestId: request.requestId, from, to, reason, code }, 'falling back to the next model');
  }

  /**
   * How a stream of `request` may be continued after a cut mid-stream, or undefined when it may
   * not: on another worker of its own model when resume is on for it (its `resume` setting,
   * overridden by the request's `X-Sluice-Resume`), then on its fallbacks; each only while the
   * model accepts an assistant prefill (`models.<m>.continuation`, on by default, and no engine
   * of the model has refused one: PrefillMemory).
   */
  resumePlan(
    request: DispatchRequest,
    body: Record<string, unknown>,
    override: boolean | undefined,
  ): ResumePlan | undefined {
    const settings = this.settings.resume(request.model);
    const sameModel = (override ?? settings.enabled) && this.prefill.accepts(request.model);
    const fallbacks = this.rest(request).filter((model) => this.prefill.accepts(model));
    if (!sameModel && fallbacks.length === 0) return undefined;
    const resumes = this.metrics.streamResumes;
    const label = this.metrics.modelLabel(request.model);
    return {
      maxAttempts: Math.max(settings.maxAttempts, sameModel ? 0 : 1),
      unsafe: unsafeToContinue(body),
      maxTextLength: this.maxTextLength,
      requestId: request.requestId,
      log: this.log,
      count: (outcome) => resumes.inc({ model: label, outcome }),
      open: (continuation) => this.openContinuation(request, body, continuation, sameModel, fallbacks),
    };
  }

  /**
   * Opens a continuation: on the model's other workers first (when allowed), then on each
   * fallback. A model whose engine refuses the prefill is remembered and skipped from then on
   * (here and in every later cut): the continuation goes on to the next model, and with none
   * left the stream ends as one that cannot be continued.
   */
  private async openContinuation(
    request: DispatchRequest,
    body: Record<string, unknown>,
    continuation: Continuation,
    sameModel: boolean,
    fallbacks: readonly string[],
  ): Promise<OpenedStream> {
    const next = continuationBody(request.api, body, continuation);
    if (!next) throw new NoWorkerAvailable(request.model, 1, 'no continuation can be built');
    const requestId = `${request.requestId}-resume${continuation.number}`;
    // Each continuation has the chain's count of attempts, its own model and fallbacks together.
    const chain = { left: this.retry.maxChainAttempts };
    let last: unknown;
    if (sameModel && this.prefill.accepts(request.model)) {
      try {
        return await this.attempts.openOnModel(
          {
            ...request,
            payload: JSON.stringify(next),
            requestId,
            exclude: continuation.exclude,
            fallbacks: [],
          },
          this.settings.of(request.model),
          this.share(chain, fallbacks),
        );
      } catch (err) {
        last = err;
        this.noteRefusal(request, request.model, err);
      }
    }
    for (let i = 0; i < fallbacks.length; i++) {
      const model = fallbacks[i]!;
      if (request.signal.aborted || chain.left <= 0) break;
      if (!this.registry.knowsModel(model) || !this.prefill.accepts(model)) continue;
      try {
        const opened = await this.attempts.openOnModel(
          {
            ...request,
            model,
            payload: JSON.stringify({ ...next, model }),
            requestId: `${requestId}-${model}`,
            fallbacks: [],
          },
          this.settings.of(model),
          this.share(chain, fallbacks.slice(i + 1)),
        );
        this.note(request, request.model, model, 'stream_cut', 'stream_cut');
        return opened;
      } catch (err) {
        last = err;
        this.noteRefusal(request, model, err);
      }
    }
    throw last ?? new NoWorkerAvailable(request.model, 1, 'no model can continue the stream');
  }

  /** Remembers a model whose engine refused the continuation's prefill (logged the first time). */
  private noteRefusal(request: DispatchRequest, model: string, err: unknown): void {
    if (!(err instanceof PrefillRejected) || !this.prefill.remember(model)) return;
    this.log.warn(
      { requestId: request.requestId, model, worker: err.workerId },
      "the model's template refuses an assistant prefill: cut streams are no longer continued on it",
    );
  }
}
