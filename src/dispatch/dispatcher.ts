import type { KindNeeded } from '../config/model-kind.js';
import type { ModelSettings } from '../config/model-settings.js';
import type { SluiceConfig } from '../config/schema.js';
import { ModelNotFound } from '../errors/not-found-errors.js';
import { MaxTokensTooLarge } from '../errors/request-content-errors.js';
import type { FlowControl } from '../flow/flow-control.js';
import type { HeldBytes } from '../memory/held-bytes.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { RequestRegistry } from '../streams/request-registry.js';
import type { HealthChecker } from '../workers/health-checker.js';
import type { WorkerRegistry } from '../workers/registry.js';
import type { Worker } from '../workers/worker.js';
import { AttemptLoop } from './attempt-loop.js';
import { FallbackChain } from './fallback-chain.js';
import { assertKind, servedKinds } from './model-kinds.js';
import { ResumableStream } from './resumable-stream.js';
import type { RetryTiming } from './retry-backoff.js';
import type { Router } from './router.js';
import type { CompletedResponse, DispatchRequest, ResumePlan } from './types.js';
import { WorkerPicker } from './worker-picker.js';

export type { CompletedResponse, DispatchRequest, OpenedStream } from './types.js';

/**
 * The engines as the pipeline sees them: which models are served and their bounds, and a request
 * sent to them. A request runs down one way: its models in order (FallbackChain), one model's
 * attempts with their retries (AttemptLoop), a worker and its slot for each attempt (WorkerPicker).
 */
export class Dispatcher {
  constructor(
    config: SluiceConfig,
    private readonly settings: ModelSettings,
    private readonly registry: WorkerRegistry,
    readonly router: Router,
    requests: RequestRegistry,
    health: HealthChecker,
    metrics: GatewayMetrics,
    log: Logger,
    /** Flow control: requests wait here while every worker of a scorer-routed model is saturated. */
    readonly flow?: FlowControl,
    /** What all requests together hold of answers (`limits.maxHeldBytes`). */
    private readonly held?: HeldBytes,
    /** The random source and the sleep of the waits between attempts (tests give their own). */
    timing?: RetryTiming,
  ) {
    const picker = new WorkerPicker(registry, router, requests, metrics, log, flow);
    const attempts = new AttemptLoop(config, picker, health, metrics, log, held, timing);
    this.chain = new FallbackChain(
      attempts,
      config.retry,
      registry,
      settings,
      metrics,
      log,
      config.limits.maxBodyBytes,
    );
  }

  /** A request's models in order (its own, then its fallbacks), and continuing a cut stream on them. */
  private readonly chain: FallbackChain;

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
   * Opens the stream a client reads: once it has produced its first output chunk, on the
   * request's model or on its fallbacks when the model cannot answer (FallbackChain); continued
   * on another worker, or on a fallback, after a cut mid-stream when `plan` allows
   * (ResumableStream).
   */
  async openResumable(
    req: DispatchRequest,
    plan: ResumePlan | undefined,
    options?: { dropUsage?: boolean },
  ): Promise<ResumableStream> {
    const opened = await this.chain.open(req);
    return new ResumableStream(opened, plan, { ...options, hold: plan && this.held?.hold() });
  }

  /** Sends a non-streaming request and reads its whole JSON answer, falling back as openResumable does. */
  complete(req: DispatchRequest): Promise<CompletedResponse> {
    return this.chain.complete(req);
  }

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
}
