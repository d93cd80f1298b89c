import type { Timeouts } from '../config/schema.js';
import type { FlowTicket } from '../flow/flow-control.js';
import type { Logger } from '../observability/logger.js';
import type { ApiName } from '../observability/metrics.js';
import type { RequestTrace } from '../observability/tracing.js';
import type { RouteContext } from '../routing/types.js';
import type { BufferingSink } from '../streams/buffering-sink.js';
import type { EngineStream } from '../streams/engine-stream.js';
import type { Attempt } from './attempt.js';

/** The shapes of dispatching: a request to the engines, what it opens or answers, and how a stream resumes. */

export interface DispatchRequest {
  api: ApiName;
  /** Upstream path, e.g. `/v1/chat/completions`. */
  path: string;
  model: string;
  /** The JSON body sent to the engine (serialised once, the same for every attempt). */
  payload: string;
  stream: boolean;
  /** The gateway's id of the client request; the first attempt's upstream id. */
  requestId: string;
  route: RouteContext;
  /** Data-parallel rank asked for by the client. */
  rank: number | undefined;
  /** Client headers to forward (already filtered by the API layer). */
  headers: Record<string, string>;
  /** Aborted when the client goes away. */
  signal: AbortSignal;
  /** `performance.now()` when the request arrived (the overall deadline counts from here). */
  receivedAt: number;
  /** Workers this request must not go to (those that failed it mid-stream). */
  exclude?: ReadonlySet<string> | undefined;
  /** The request's spans, when tracing is on and it is sampled. */
  trace?: RequestTrace | undefined;
  /**
   * The models after this one the request may move to (FallbackChain): undefined, its model's
   * configured fallbacks; empty, none.
   */
  fallbacks?: readonly string[] | undefined;
  /**
   * Whether the caller's key may use a model (undefined: every model), the rule its own model
   * and fallbacks were admitted by: the chain never moves to a model it may not use.
   */
  mayUse: ModelRule | undefined;
  /** When the request's one budget ends (`performance.now()` clock); its own model's deadline when unset. */
  deadlineAt?: number | undefined;
  /** Its tenant, priority class and queue deadline, for flow control (defaults when unset). */
  flow?: FlowTicket | undefined;
}

/** Whether a model may be used (the caller's key's rule, auth/api-keys.ts keyAllowsModel). */
export type ModelRule = (model: string) => boolean;

/**
 * The engine attempts one model of a chain may make: at most `max` (its share of what the chain
 * has left), and never past the chain's own count (`chain.left`, taken one by each attempt made).
 */
export interface AttemptShare {
  readonly max: number;
  readonly chain: { left: number };
}

export interface OpenedStream {
  attempt: Attempt;
  stream: EngineStream;
  /** Holds the events read before the stream was handed over; `attach` a sink to it. */
  sink: BufferingSink;
  timeouts: Timeouts;
}

export interface CompletedResponse {
  attempt: Attempt;
  status: number;
  contentType: string;
  body: Buffer;
  json: Record<string, unknown>;
}

/** What a continuation request is made of. */
export interface Continuation {
  /** The text generated so far on the only choice, over every attempt. */
  text: string;
  /** Output chunks generated so far: the estimate of tokens already produced. */
  tokens: number;
  /** Workers that failed this request: a continuation never goes back to one of them. */
  exclude: ReadonlySet<string>;
  /** 1 for the first resume, 2 for the second... */
  number: number;
}

export interface ResumePlan {
  maxAttempts: number;
  /** Why the request's stream cannot be continued whatever it shows (continuation.ts unsafeToContinue). */
  unsafe?: string | undefined;
  /**
   * The longest text kept for a continuation, in UTF-16 code units (`limits.maxBodyBytes`): a
   * stream whose text passes it is not resumed, and what it kept is let go.
   */
  maxTextLength: number;
  /** Opens the continuation on another worker (the dispatcher's pre-first-byte retries included). */
  open(continuation: Continuation): Promise<OpenedStream>;
  /** Records a resume outcome (`resumed`, `exhausted`, `unsafe`, `no_worker`) for the metric. */
  count(outcome: string): void;
  log: Logger;
  requestId: string;
}
