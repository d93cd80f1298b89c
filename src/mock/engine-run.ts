import { EngineMetrics } from './engine-metrics.js';
import { type EngineClock, EngineModel, EngineRejected, type EngineTicket } from './engine-model.js';
import type { EngineOptions } from './engine-options.js';
import { chatTokens, completionTokens, textTokens } from './engine-tokens.js';
import { reasoningText, TOOL_ARGUMENTS } from './generate.js';
import type { GenerationRequest } from './generation-request.js';
import type { Api } from './sse.js';
import type { Plan, TokenSource } from './stream.js';

/**
 * A mock worker's engine: the engine model (engine-model.ts), its `/metrics`, and what a
 * generation request is to it: its prompt's tokens (engine-tokens.ts), the tokens its plan
 * generates, its LoRA adapter (the requested model, when it names one), and a token source
 * that paces its stream (or, not streamed, tells when its answer is done).
 */
export class MockEngine {
  readonly model: EngineModel;
  readonly metrics: EngineMetrics;
  /** The traced requests that ended, oldest first (at most `TRACED`); see `takeTraced`. */
  private traced: TracedRequest[] = [];

  constructor(
    options: EngineOptions,
    clock: EngineClock,
    modelName: string,
    wallNow: () => number = Date.now,
  ) {
    this.model = new EngineModel(options, clock);
    this.metrics = new EngineMetrics(this.model, modelName, wallNow);
  }

  /** The LoRA adapters served. */
  get adapters(): readonly string[] {
    return this.model.options.adapters;
  }

  /**
   * Submits a request whose plan is made: sets its usage's prompt tokens to the engine's count.
   * Throws EngineRejected when the engine cannot take it.
   */
  submit(body: GenerationRequest, api: Api, plan: Plan, model: string, traceId?: string): EngineRun {
    const prompt =
      api === 'chat'
        ? chatTokens(Array.isArray(body.messages) ? body.messages : [], body.add_generation_prompt !== false)
        : completionTokens(body.prompt);
    if (prompt.length === 0) prompt.push(0); // an empty prompt is one token (BOS)
    const perChoice = plan.usage.completion_tokens / plan.choices;
    const run = new EngineRun();
    const priority = priorityOf(body.priority);
    run.ticket = this.model.submit({
      prompt,
      outputTokens: Math.max(1, perChoice),
      outputIds: answerTokens(plan),
      adapter: this.model.servesAdapter(model) ? model : undefined,
      priority,
      finishReason: plan.tool ? 'stop' : plan.completion.finishReason,
      onToken: run.onToken,
      onEnd: traceId === undefined ? undefined : (ticket) => this.trace(traceId, ticket, priority),
    });
    plan.usage.prompt_tokens = prompt.length;
    plan.usage.total_tokens = prompt.length + plan.usage.completion_tokens;
    return run;
  }

  /** The traced requests that ended since the last call (the oldest dropped past 100,000). */
  takeTraced(): TracedRequest[] {
    const out = this.traced;
    this.traced = [];
    return out;
  }

  private trace(id: string, t: EngineTicket, priority: number | undefined): void {
    this.traced.push({
      id,
      state: t.state,
      promptTokens: t.promptTokens,
      hitTokens: t.hitTokens,
      priority: priority ?? null,
      arrivedAt: t.arrivedAt,
      admittedAt: t.admittedAt ?? null,
      firstTokenAt: t.firstTokenAt ?? null,
      finishedAt: t.finishedAt ?? null,
    });
    if (this.traced.length > TRACED) this.traced.splice(0, this.traced.length - TRACED);
  }
}

const TRACED = 100_000;

/**
 * What the engine did with a request that carried `x-mock-trace-id` (`GET /mock/engine/requests`):
 * its times on the engine's clock (ms), so that its time to first token at the engine
 * (`firstTokenAt - arrivedAt`: queue and prefill) can be told apart from what the way to it added.
 */
export interface TracedRequest {
  id: string;
  state: EngineTicket['state'];
  promptTokens: number;
  hitTokens: number;
  /** The `priority` its body carried; null when it had none (its place is then 0's). */
  priority: number | null;
  arrivedAt: number;
  admittedAt: number | null;
  firstTokenAt: number | null;
  finishedAt: number | null;
}

/** The tokens of the answer as the next turn of a conversation would send it back. */
function answerTokens(plan: Plan): number[] {
  if (plan.tool) {
    const args = plan.tool.argumentPieces ? plan.tool.argumentPieces.join('') : TOOL_ARGUMENTS;
    return textTokens(args, textTokens(plan.tool.name));
  }
  const out = plan.reasoningTokens > 0 ? textTokens(reasoningText(plan.reasoningTokens)) : [];
  return textTokens(plan.completion.text(), out);
}

/** One request in the engine: its ticket, the token source of its stream, and its end. */
export class EngineRun implements TokenSource {
  ticket!: EngineTicket;
  private tick: (() => void) | undefined;
  private pending = 0;
  private done = false;
  private onDone: (() => void) | undefined;

  attach(tick: () => void): void {
    this.tick = tick;
    for (; this.pending > 0; this.pending--) tick();
  }

  /** Calls `callback` when the engine has computed the last token (at once if it has). */
  whenDone(callback: () => void): void {
    if (this.done) callback();
    else this.onDone = callback;
  }

  readonly onToken = (_index: number, last: boolean): void => {
    this.fire();
    if (!last) return;
    this.fire(); // the finish
    this.done = true;
    this.onDone?.();
  };

  private fire(): void {
    if (this.tick) this.tick();
    else this.pending++;
  }
}

/** A body's `priority`: a number (the engine model refuses one that is not an integer), or absent. */
function priorityOf(value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number')
    throw new EngineRejected(`priority must be an integer, got ${JSON.stringify(value)}`);
  return value;
}
