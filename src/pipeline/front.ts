import type { IncomingHttpHeaders } from 'node:http';
import type { CompletedResponse } from '../dispatch/dispatcher.js';
import type { SluiceError } from '../errors/base.js';
import type { ApiName } from '../observability/metrics.js';
import type { ApiRequest } from './exchange.js';
import type { StreamEncoder } from './relay.js';

/**
 * What a front turns a client's request into: the engine request, and how to answer in the
 * front's shape. Everything else (admission, tracing, observing, dispatch, relay, resume, the
 * clocks, counting) is the pipeline's.
 */
export interface Translation {
  /** The model the client named. */
  readonly model: string;
  /** The engine endpoint (`/v1/chat/completions`, `/v1/completions`). */
  readonly path: string;
  readonly stream: boolean;
  /** The engine request's body: kept for a continuation when the stream may resume. */
  readonly body: Record<string, unknown>;
  /** Its JSON text (the client's own when the front changed nothing). */
  readonly payload: string;
  /** The output-token fields the client set, to bound: `[param, value]`. */
  readonly outputTokens: readonly (readonly [string, number | null | undefined])[];
  /** The prompt as text, for prefix-aware routing (asked only when the model's policy wants it). */
  promptText(): string;
  /** Usage asked of the engine for the key's counters only: never shown to the client. */
  readonly hiddenUsage: boolean;
  /** How the stream is written (streams only); `model` answers its first part (a fallback, when it fell back). */
  encoder(requestId: string, model: string): StreamEncoder;
  /** The whole answer, from the engine's (non-streaming only). */
  answer(done: CompletedResponse): WholeAnswer;
  /** What the request's span records of it. */
  readonly traced: Record<string, unknown>;
  /** The models the client named to answer when its own cannot (its body's `fallbacks`). */
  readonly fallbacks: readonly string[] | undefined;
}

/** A whole answer in a front's shape. */
export interface WholeAnswer {
  /** Bytes as they are (with their content type), or an object sent as JSON. */
  readonly payload: Buffer | object;
  readonly contentType?: string | undefined;
  readonly headers?: Readonly<Record<string, string>> | undefined;
}

/**
 * A front of the generation kind (chat completions, completions, Anthropic Messages): its
 * translation of one request onto an engine's chat-completions request, and the shape of its
 * answers and errors. Registered with the pipeline (pipeline/run-generation.ts), it is served
 * over the framework-free route and fastify alike.
 */
export interface GenerationFront {
  /** The metric and log label of its requests. */
  readonly api: ApiName;
  /** Its path, as its spans name the route. */
  readonly path: string;
  /** The caller's key when this API reads it elsewhere than `Authorization: Bearer`. */
  credential?(headers: IncomingHttpHeaders): string | undefined;
  /** The status this API's shape gives an error (Anthropic's differ from OpenAI's). */
  statusOf?(error: SluiceError): number;
  /**
   * Validates the request and translates it (no turn of the event loop): throws typed errors.
   * `keyed`: the request came with an API key (its usage is counted, so a stream must carry it).
   */
  translate(request: ApiRequest, keyed: boolean): Translation;
}
