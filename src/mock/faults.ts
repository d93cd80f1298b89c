/**
 * Faults the mock engine injects, chosen per request (`X-Mock-Fault: <spec>[,<spec>...]`) or for
 * every request of a worker (`--fault`). Each imitates something real engines do:
 *
 * | spec | imitates |
 * |---|---|
 * | `http_500`, `http_503`, `http_400`, `http_429` | an engine refusing before any stream: crash/overload (500/503), a bad request (400), admission control (429, with Retry-After) |
 * | `reset_after:N` | the engine process killed mid-stream: the TCP connection is reset after N content chunks |
 * | `drop_after:N` | the same for any response: the socket is destroyed after N chunks (half the body when not streaming) |
 * | `error_frame_after:N` | vLLM's in-band error (integer code): `data: {"error":{..."code":500}}` then `[DONE]` |
 * | `error_frame_str_after:N` | the string-code shape (OpenAI/SGLang style): `{"error":{"type":"server_error","code":"internal_error"}}` |
 * | `event_error_after:N` | an `event: error` SSE event, as some servers and proxies send |
 * | `stall_after:N` | a hung engine (deadlocked scheduler, SIGSTOP): no more bytes, connection held open |
 * | `no_finish` | a stream that ends with `[DONE]` but no chunk ever carried a `finish_reason` |
 * | `no_done` | a stream that finishes (`finish_reason`) but closes without `[DONE]` |
 * | `eof_after:N` | a clean close after N chunks: no `finish_reason`, no `[DONE]` (a proxy timeout, a worker restart) |
 * | `malformed_after:N` | a corrupted chunk (truncated JSON) after N chunks, then the stream goes on |
 * | `delay_headers:MS` | a slow first byte: the response headers wait MS |
 * | `delay_first:MS` | headers at once, the first event after MS (a long prefill) |
 */
export type FaultName =
  | 'http_500'
  | 'http_503'
  | 'http_400'
  | 'http_429'
  | 'reset_after'
  | 'drop_after'
  | 'error_frame_after'
  | 'error_frame_str_after'
  | 'event_error_after'
  | 'stall_after'
  | 'no_finish'
  | 'no_done'
  | 'eof_after'
  | 'malformed_after'
  | 'delay_headers'
  | 'delay_first';

const WITH_ARGUMENT = new Set<FaultName>([
  'reset_after',
  'drop_after',
  'error_frame_after',
  'error_frame_str_after',
  'event_error_after',
  'stall_after',
  'eof_after',
  'malformed_after',
  'delay_headers',
  'delay_first',
]);
const WITHOUT_ARGUMENT = new Set<FaultName>([
  'http_500',
  'http_503',
  'http_400',
  'http_429',
  'no_finish',
  'no_done',
]);

export interface Faults {
  /** HTTP status to refuse with before any stream. */
  status?: number;
  /** Mid-stream faults fire after this many content chunks. */
  after?: {
    kind: Exclude<FaultName, `http_${string}` | 'no_finish' | 'no_done' | `delay_${string}`>;
    n: number;
  };
  noFinish?: boolean;
  noDone?: boolean;
  delayHeadersMs?: number;
  delayFirstMs?: number;
}

export class FaultSpecError extends Error {}

/** Parses `reset_after:3,delay_first:100`; throws FaultSpecError naming the bad part. */
export function parseFault(spec: string | undefined): Faults {
  const faults: Faults = {};
  if (!spec) return faults;
  for (const part of spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const [name, arg, extra] = part.split(':') as [string, string | undefined, string | undefined];
    const fault = name as FaultName;
    if (extra !== undefined) throw new FaultSpecError(`bad fault '${part}'`);
    if (WITHOUT_ARGUMENT.has(fault)) {
      if (arg !== undefined) throw new FaultSpecError(`fault '${name}' takes no argument`);
      if (fault === 'no_finish') faults.noFinish = true;
      else if (fault === 'no_done') faults.noDone = true;
      else faults.status = Number(fault.slice(5));
      continue;
    }
    if (!WITH_ARGUMENT.has(fault)) {
      throw new FaultSpecError(
        `unknown fault '${name}'; known: ${[...WITHOUT_ARGUMENT, ...WITH_ARGUMENT].join(', ')}`,
      );
    }
    const n = Number(arg);
    if (arg === undefined || !Number.isInteger(n) || n < 0) {
      throw new FaultSpecError(`fault '${name}' needs a non-negative integer, as in ${name}:3`);
    }
    if (fault === 'delay_headers') faults.delayHeadersMs = n;
    else if (fault === 'delay_first') faults.delayFirstMs = n;
    else faults.after = { kind: fault as NonNullable<Faults['after']>['kind'], n };
  }
  return faults;
}
