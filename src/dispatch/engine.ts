import type { CompletedResponse, DispatchRequest } from './dispatcher.js';
import type { ResumableStream, ResumePlan } from './resumable-stream.js';

/**
 * The engines as a front's machinery sees them, handed to it by the pipeline: the models and
 * their bounds, opening the stream a client reads (retried before its first byte, resumed after
 * a cut when its plan allows), a whole answer, and how a stream may resume. The dispatcher is the
 * one implementation; nothing above the pipeline names it.
 */
export interface Engine {
  /** Throws ModelNotFound for a model no worker serves, WrongModelKind for one that is not a chat model. */
  assertModel(model: string): void;
  /** Throws MaxTokensTooLarge when `requested` is over the model's bound. */
  assertOutputTokens(model: string, param: string, requested: number | null | undefined): void;
  openResumable(request: DispatchRequest, plan: ResumePlan | undefined): Promise<ResumableStream>;
  complete(request: DispatchRequest): Promise<CompletedResponse>;
  resumePlan(
    request: DispatchRequest,
    body: Record<string, unknown>,
    override: boolean | undefined,
  ): ResumePlan | undefined;
}
