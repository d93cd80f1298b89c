import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { McpTimeout } from './timeout.js';

/**
 * A failure of an MCP server, described by what failed only (a status, a timeout, a bound, "not
 * an MCP server"): `reason` (a predicate: "answered HTTP 500", "did not answer within 400 ms")
 * is safe to show to the client, it never carries what the server said. `detail` is for the log.
 */
export class McpFailure extends Error {
  constructor(
    readonly reason: string,
    readonly detail: string,
  ) {
    super(reason);
    this.name = 'McpFailure';
  }
}

/** A message from the server over `maxMessageBytes`: the connection was cut while reading it. */
export class McpMessageTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`The MCP server sent a message larger than ${limit} bytes; it was cut.`);
    this.name = 'McpMessageTooLarge';
  }
}

/** The server answered with a redirect: never followed (it could lead away from the checked address). */
export class McpRedirect extends Error {
  constructor(readonly status: number) {
    super(`The MCP server answered HTTP ${status} (a redirect, not followed).`);
    this.name = 'McpRedirect';
  }
}

/** What one connection saw of its server's HTTP answers, to say what failed (never what it said). */
export interface Guard {
  /** Aborted with McpMessageTooLarge when a message is cut: whatever waited on the server fails at once. */
  readonly trip: AbortController;
  /** The status of the last answer that was not a success. */
  status?: number | undefined;
}

/** A bounded, single-line description of a failure (no headers, no stack), for logs. */
export function describe(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/\s+/g, ' ').slice(0, 500) || 'The MCP server failed.';
}

/** The code of a network error (ECONNREFUSED, ENOTFOUND, ...) somewhere in an error's causes. */
function networkCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^E[A-Z_]+$/.test(code)) return code;
  }
  return undefined;
}

/**
 * The codes of a connection that was open and then closed or reset by the server: undici's
 * UND_ERR_SOCKET ("other side closed"), a reset, a write to a closed socket. A server that
 * crashed mid-call, told apart from one that could not be reached or did not answer in time.
 */
const DROPPED_CONNECTION_CODES: ReadonlySet<string> = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

/** The code of a dropped connection somewhere in an error's causes. */
function droppedConnectionCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && DROPPED_CONNECTION_CODES.has(code)) return code;
  }
  return undefined;
}

/**
 * The SDK's own request timeout (it races the gateway's: both are given the same bound) as an
 * McpTimeout, so that a timeout reads the same whichever fired first.
 */
export function sdkTimeout(err: unknown): McpTimeout | undefined {
  if (!(err instanceof McpError) || err.code !== ErrorCode.RequestTimeout) return undefined;
  const ms = (err.data as { timeout?: unknown } | undefined)?.timeout;
  return typeof ms === 'number' ? new McpTimeout(ms) : undefined;
}

/**
 * What failed, in words that carry nothing the server said: a timeout, a message over the bound,
 * a redirect, a dropped connection, an HTTP status, a network error's code, an MCP error's code,
 * or "not an MCP server".
 */
export function explain(err: unknown, guard: Guard): McpFailure {
  const detail = describe(err);
  const tripped = guard.trip.signal.reason;
  if (err instanceof McpFailure) return err;
  const timeout = err instanceof McpTimeout ? err : sdkTimeout(err);
  if (timeout) return new McpFailure(`did not answer within ${timeout.ms} ms`, detail);
  if (tripped instanceof McpMessageTooLarge || err instanceof McpMessageTooLarge) {
    const limit = (tripped instanceof McpMessageTooLarge ? tripped : (err as McpMessageTooLarge)).limit;
    return new McpFailure(`sent a message larger than ${limit} bytes, which was cut`, detail);
  }
  const redirect = findCause(err, McpRedirect);
  if (redirect)
    return new McpFailure(`answered HTTP ${redirect.status}, a redirect the gateway does not follow`, detail);
  const dropped = droppedConnectionCode(err);
  if (dropped) return new McpFailure(`closed the connection before answering (${dropped})`, detail);
  if (guard.status !== undefined) return new McpFailure(`answered HTTP ${guard.status}`, detail);
  const code = networkCode(err);
  if (code) return new McpFailure(`could not be reached (${code})`, detail);
  if (err instanceof McpError) return new McpFailure(`answered with MCP error ${err.code}`, detail);
  return new McpFailure('did not answer as an MCP server', detail);
}

function findCause<T extends Error>(err: unknown, type: new (...args: never[]) => T): T | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++)
    if (e instanceof type) return e;
  return undefined;
}
