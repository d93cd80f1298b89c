import { EngineMetrics } from './engine-metrics.js';
import { type EngineClock, EngineModel, type EngineTicket } from './engine-model.js';
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
  submit(body: GenerationRequest, api: Api, plan: Plan, model: string): EngineRun {
    const prompt =
      api === 'chat'
        ? chatTokens(Array.isArray(body.messages) ? body.messages : [], body.add_generation_prompt !== false)
        : completionTokens(body.prompt);
    if (prompt.length === 0) prompt.push(0); // an empty prompt is one token (BOS)
    const perChoice = plan.usage.completion_tokens / plan.choices;
    const run = new EngineRun();
    run.ticket = this.model.submit({
      prompt,
      outputTokens: Math.max(1, perChoice),
      outputIds: answerTokens(plan),
      adapter: this.model.servesAdapter(model) ? model : undefined,
      finishReason: plan.tool ? 'stop' : plan.completion.finishReason,
      onToken: run.onToken,
    });
    plan.usage.prompt_tokens = prompt.length;
    plan.usage.total_tokens = prompt.length + plan.usage.completion_tokens;
    return run;
  }
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
