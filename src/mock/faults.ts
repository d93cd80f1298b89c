/**
 * Faults the mock engine injects. A request names them in the `x-mock-fault` header, else the
 * worker-wide fault applies (`MockWorkerOptions.fault`, `setFault`, `POST /mock/fault`). Several
 * specs combine with commas: `delay_first:200,malformed_after:2,reset_after:5`.
 *
 * `N` counts token chunks (content, reasoning or tool-call deltas, over all choices) written after
 * the role chunk. A fault `*_after:N` fires just before token chunk N+1 would be written; when the
 * stream has fewer than N token chunks it fires after the last one, before any finish_reason,
 * usage or `[DONE]`, so every request carrying a fault does show it.
 *
 * Faults that only make sense on a stream are ignored by non-streaming requests, except
 * `drop_after` (half the body, then the socket is destroyed) and `stall_after` (never answers).
 */

/** The fault names, each with what it imitates. */
export const FAULTS = {
  /** An engine that crashed or failed the request before streaming (vLLM's 500 `InternalServerError`). */
  http_500: 'error status 500 before any stream',
  /** An engine that is overloaded, sleeping or still loading (vLLM/SGLang answer 503). */
  http_503: 'error status 503 before any stream',
  /** Admission control of an engine whose queue is full (429, with `retry-after: 1`). */
  http_429: 'error status 429 with retry-after before any stream',
  /** A 429 or 503 without `retry-after` (an engine or proxy that sends none), with `http_429` or `http_503`. */
  no_retry_after: 'the 429 or 503 of the spec carries no retry-after header',
  /** An engine rejecting the request as invalid (vLLM's 400 `BadRequestError`): not retryable. */
  http_400: 'error status 400 before any stream',
  /** The engine process killed mid-stream: the connection closes in the middle of the chunked body. */
  reset_after: 'streams: the socket is destroyed after N token chunks',
  /** The same for non-streaming requests too: half of the JSON body is written, then the socket is destroyed. */
  drop_after: 'streams and non-streaming: the socket is destroyed after N chunks (half the body)',
  /** vLLM's in-band error (integer code), as its OpenAI server sends on an engine error mid-stream, then `[DONE]`. */
  error_frame_after: 'streams: data: {"error":{"object":"error",...,"code":500}} then [DONE]',
  /** The string-code in-band error shape (OpenAI / SGLang style), then `[DONE]`. */
  error_frame_str_after:
    'streams: data: {"error":{"type":"server_error","code":"internal_error"}} then [DONE]',
  /** An `event: error` SSE event, as some servers and proxies end a failed stream; no `[DONE]`. */
  event_error_after: 'streams: event: error, then the response ends',
  /** A hung engine (deadlocked scheduler, SIGSTOP): no more bytes, the connection stays open. */
  stall_after: 'streams: nothing more is sent after N token chunks; non-streaming: never answers',
  /** A broken engine or proxy whose last chunk never carries a finish_reason, yet sends `[DONE]`. */
  no_finish: 'streams: no finish_reason on any chunk, [DONE] at the end',
  /** An engine or proxy that finishes (finish_reason) but closes without `[DONE]`. */
  no_done: 'streams: finish_reason sent, then the response ends without [DONE]',
  /** A clean close mid-stream (proxy timeout, worker restart): no finish_reason, no `[DONE]`. */
  eof_after: 'streams: the response ends cleanly after N token chunks',
  /** A corrupted chunk (truncated JSON), after which the stream goes on normally. */
  malformed_after: 'streams: a broken JSON frame after N token chunks, then the stream continues',
  /** An engine that dies on accepting the request: the socket is reset before any response header. */
  reset_headers: 'the socket is destroyed before any response header',
  /** vLLM's answer to a prompt over the model's context window (a 400 BadRequestError naming it). */
  context_length: "a 400 saying the prompt is over the model's maximum context length (vLLM's words)",
  /** A provider's content-policy refusal (OpenAI's 400 content_policy_violation). */
  content_policy: 'a 400 with code content_policy_violation',
  /** A model whose template rejects an assistant prefill: a continuation request is a 400. */
  reject_prefill: 'a 400 for a request that continues a final assistant message (continue_final_message)',
  /** The fault applies to one request only; the worker serves normally after it. */
  once: 'the other faults of the spec apply to one request, then are cleared',
  /** A slow first byte (queueing before the engine accepts the request): headers wait MS. */
  delay_headers: 'the response headers wait MS',
  /** A long prefill: headers at once, the first event after MS. */
  delay_first:
    'streams: headers at once, the first event after MS (non-streaming: MS more before the answer)',
} as const;

export type FaultName = keyof typeof FAULTS;

/** Faults that fire at a token position. */
export type TriggerKind =
  | 'reset_after'
  | 'drop_after'
  | 'error_frame_after'
  | 'error_frame_str_after'
  | 'event_error_after'
  | 'stall_after'
  | 'eof_after'
  | 'malformed_after';

const TRIGGERS = new Set<string>([
  'reset_after',
  'drop_after',
  'error_frame_after',
  'error_frame_str_after',
  'event_error_after',
  'stall_after',
  'eof_after',
  'malformed_after',
] satisfies TriggerKind[]);
const STATUSES: Record<string, number> = { http_500: 500, http_503: 503, http_429: 429, http_400: 400 };
/** Faults without an argument that are not a plain status. */
const FLAGS = new Set([
  'reset_headers',
  'context_length',
  'content_policy',
  'reject_prefill',
  'no_retry_after',
  'once',
]);

export interface Trigger {
  kind: TriggerKind;
  n: number;
}

export interface Faults {
  /** HTTP status to refuse with before any stream. */
  status?: number;
  /** The Retry-After of a 429 or 503 (`http_429:N`), in seconds. */
  retryAfter?: number;
  /** The 429 or 503 carries no Retry-After (`no_retry_after`). */
  noRetryAfter?: boolean;
  /** What the refusal says: a context-length or content-policy 400 (status 400 with it). */
  refusal?: 'context_length' | 'content_policy';
  /** The socket is destroyed before any response header. */
  resetHeaders?: boolean;
  /** A continuation request (a final assistant message continued) is refused with a 400. */
  rejectPrefill?: boolean;
  /** The faults apply to one request only (a worker-wide fault is cleared after it). */
  once?: boolean;
  /** Mid-stream faults, sorted by their token position. */
  triggers: Trigger[];
  noFinish: boolean;
  noDone: boolean;
  delayHeadersMs: number;
  delayFirstMs: number;
}

export const NO_FAULTS: Readonly<Faults> = Object.freeze({
  triggers: [],
  noFinish: false,
  noDone: false,
  delayHeadersMs: 0,
  delayFirstMs: 0,
});

export class FaultSpecError extends Error {
  override readonly name = 'FaultSpecError';
}

const KNOWN = Object.keys(FAULTS)
  .map((name) => (TRIGGERS.has(name) ? `${name}:N` : name.startsWith('delay_') ? `${name}:MS` : name))
  .join(', ');

/**
 * Parses a fault spec such as `reset_after:3` or `delay_first:100,malformed_after:2`.
 * Empty or undefined means no fault. Throws a FaultSpecError naming the bad part.
 */
export function parseFault(spec: string | undefined): Faults {
  if (!spec || spec.trim() === '') return NO_FAULTS;
  const faults: Faults = { triggers: [], noFinish: false, noDone: false, delayHeadersMs: 0, delayFirstMs: 0 };
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    if (part === '') continue;
    const colon = part.indexOf(':');
    const name = colon < 0 ? part : part.slice(0, colon);
    const arg = colon < 0 ? undefined : part.slice(colon + 1);
    if (!Object.hasOwn(FAULTS, name)) {
      throw new FaultSpecError(`unknown fault '${name}' in '${spec}'; known faults: ${KNOWN}`);
    }
    const status = STATUSES[name];
    if ((name === 'http_429' || name === 'http_503') && arg !== undefined) {
      if (!/^\d+$/.test(arg))
        throw new FaultSpecError(`fault '${name}' takes Retry-After seconds, as in '${name}:5'`);
      faults.status = status;
      faults.retryAfter = Number(arg);
      continue;
    }
    if (FLAGS.has(name)) {
      if (arg !== undefined) throw new FaultSpecError(`fault '${name}' takes no argument (got '${part}')`);
      if (name === 'reset_headers') faults.resetHeaders = true;
      else if (name === 'reject_prefill') faults.rejectPrefill = true;
      else if (name === 'no_retry_after') faults.noRetryAfter = true;
      else if (name === 'once') faults.once = true;
      else {
        faults.status = 400;
        faults.refusal = name as 'context_length' | 'content_policy';
      }
      continue;
    }
    if (status !== undefined || name === 'no_finish' || name === 'no_done') {
      if (arg !== undefined) throw new FaultSpecError(`fault '${name}' takes no argument (got '${part}')`);
      if (status !== undefined) faults.status = status;
      else if (name === 'no_finish') faults.noFinish = true;
      else faults.noDone = true;
      continue;
    }
    const n = arg === undefined || !/^\d+$/.test(arg) ? Number.NaN : Number(arg);
    if (!Number.isSafeInteger(n)) {
      const unit = name.startsWith('delay_') ? 'milliseconds' : 'token chunks';
      throw new FaultSpecError(
        `fault '${name}' needs a non-negative integer (${unit}), as in '${name}:3'; got '${part}'`,
      );
    }
    if (name === 'delay_headers') faults.delayHeadersMs = n;
    else if (name === 'delay_first') faults.delayFirstMs = n;
    else faults.triggers.push({ kind: name as TriggerKind, n });
  }
  faults.triggers.sort((a, b) => a.n - b.n);
  return faults;
}
