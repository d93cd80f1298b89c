import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, ListToolsResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { Agent, Response as UndiciResponse, fetch as undiciFetch } from 'undici';
import { type CheckedTarget, pinnedLookup } from './address.js';

/** A tool an MCP server lists, as the gateway offers it to the engine. */
export interface McpTool {
  name: string;
  description?: string | undefined;
  inputSchema: Record<string, unknown>;
  annotations?: Record<string, unknown> | undefined;
}

/** What a tool call gave: its output text, or the error the engine is told about. */
export type McpCallResult = { output: string; error?: undefined } | { output?: undefined; error: string };

const CLIENT_INFO = { name: 'sluice', version: '0.1.0' };

/** How one connection to an MCP server is made and bounded. */
export interface McpOpenOptions {
  /** Sent to this server only. */
  headers: Record<string, string>;
  timeoutMs: number;
  signal: AbortSignal;
  /** The checked address of the server's host: every socket goes there, whatever DNS says later. */
  target: CheckedTarget;
  /**
   * Most bytes of one message read from the server (one event of an event stream, or one JSON
   * body): past it the connection is cut while reading, so a server cannot make the gateway hold
   * more than this per message.
   */
  maxMessageBytes: number;
}

/** The bounds of listing one server's tools. */
export interface McpListLimits {
  maxPages: number;
  maxTools: number;
  maxToolBytes: number;
  maxSchemaDepth: number;
  /** Bound of one page. */
  pageTimeoutMs: number;
}

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
class McpRedirect extends Error {
  constructor(readonly status: number) {
    super(`The MCP server answered HTTP ${status} (a redirect, not followed).`);
    this.name = 'McpRedirect';
  }
}

/** What one connection saw of its server's HTTP answers, to say what failed (never what it said). */
interface Guard {
  /** Aborted with McpMessageTooLarge when a message is cut: whatever waited on the server fails at once. */
  readonly trip: AbortController;
  /** The status of the last answer that was not a success. */
  status?: number | undefined;
}

/**
 * One connection to an MCP server, made with the official SDK client: Streamable HTTP first,
 * then the older HTTP+SSE transport when the server does not speak it. The request's headers go
 * to this server only; every socket goes to the checked address; redirects are refused (they
 * could lead away from it); what the server sends is read within `maxMessageBytes` per message,
 * and the body of an answer that is not a success is never read.
 */
export class McpConnection {
  private constructor(
    private readonly client: Client,
    private readonly agent: Agent,
    private readonly guard: Guard,
    readonly url: string,
  ) {}

  static async open(url: string, options: McpOpenOptions): Promise<McpConnection> {
    const { headers, timeoutMs } = options;
    const requestInit: RequestInit = { headers, redirect: 'manual' };
    const guard: Guard = { trip: new AbortController() };
    const signal = AbortSignal.any([options.signal, guard.trip.signal]);
    // Its own connection pool: closing the connection destroys its sockets, which is what tells a
    // server that a call in flight was abandoned (an aborted fetch may hold its socket until the next byte).
    const agent = new Agent({ connections: 4, connect: { lookup: pinnedLookup(options.target) } });
    const fetch = boundedFetch(agent, headers, guard, options.maxMessageBytes);
    const streamable = new Client(CLIENT_INFO);
    try {
      await withTimeout(
        streamable.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit, fetch }), {
          timeout: timeoutMs,
          signal,
        }),
        timeoutMs,
        signal,
      );
      return new McpConnection(streamable, agent, guard, url);
    } catch (first) {
      await streamable.close().catch(() => {});
      const failure = explain(first, guard);
      // The older HTTP+SSE transport only for a server that answered Streamable HTTP with a 4xx
      // (the MCP specification's backwards compatibility); never after a timeout or a refusal.
      const old =
        first instanceof StreamableHTTPError &&
        first.code !== undefined &&
        first.code >= 400 &&
        first.code < 500;
      if (signal.aborted || !old) {
        void agent.destroy().catch(() => {});
        throw options.signal.aborted ? first : failure;
      }
      guard.status = undefined;
      const sse = new Client(CLIENT_INFO);
      try {
        await withTimeout(
          sse.connect(
            new SSEClientTransport(new URL(url), {
              requestInit,
              fetch,
              eventSourceInit: { fetch },
            }),
            { timeout: timeoutMs, signal },
          ),
          timeoutMs,
          signal,
        );
        return new McpConnection(sse, agent, guard, url);
      } catch {
        await sse.close().catch(() => {});
        void agent.destroy().catch(() => {});
        throw options.signal.aborted ? first : failure;
      }
    }
  }

  /**
   * The server's tools, page by page within the bounds: more pages, more tools, a larger or
   * deeper tool definition than allowed fails the listing (an McpFailure), as does any failure
   * of the server. The caller bounds the whole listing in time.
   */
  async listTools(limits: McpListLimits, outer: AbortSignal): Promise<McpTool[]> {
    const signal = AbortSignal.any([outer, this.guard.trip.signal]);
    const tools: McpTool[] = [];
    let cursor: string | undefined;
    try {
      for (let page = 0; ; page++) {
        if (page === limits.maxPages)
          throw new McpFailure(
            `has more than ${limits.maxPages} pages of tools (mcp.maxListPages)`,
            'too many pages',
          );
        // tools/list itself, not Client.listTools: that one also compiles every tool's output schema.
        const listed = await withTimeout(
          this.client.request(
            { method: 'tools/list', params: cursor === undefined ? {} : { cursor } },
            ListToolsResultSchema,
            { timeout: limits.pageTimeoutMs, signal },
          ),
          limits.pageTimeoutMs,
          signal,
        );
        for (const tool of listed.tools) {
          if (tools.length === limits.maxTools)
            throw new McpFailure(
              `lists more than ${limits.maxTools} tools (mcp.maxToolsPerServer)`,
              'too many tools',
            );
          const inputSchema = tool.inputSchema as Record<string, unknown>;
          const annotations = tool.annotations as Record<string, unknown> | undefined;
          if (
            deeperThan(inputSchema, limits.maxSchemaDepth) ||
            deeperThan(annotations, limits.maxSchemaDepth)
          )
            throw new McpFailure(
              `lists a tool whose schema nests deeper than ${limits.maxSchemaDepth} levels (mcp.maxToolSchemaDepth)`,
              'tool schema too deep',
            );
          const kept: McpTool = {
            name: tool.name,
            description: tool.description,
            inputSchema,
            ...(annotations ? { annotations } : {}),
          };
          if (Buffer.byteLength(JSON.stringify(kept)) > limits.maxToolBytes)
            throw new McpFailure(
              `lists a tool whose definition is larger than ${limits.maxToolBytes} bytes (mcp.maxToolBytes)`,
              'tool definition too large',
            );
          tools.push(kept);
        }
        cursor = listed.nextCursor;
        if (!cursor) break;
      }
    } catch (err) {
      if (outer.aborted || err instanceof McpFailure) throw err;
      throw explain(err, this.guard);
    }
    return tools;
  }

  /**
   * Calls a tool; a failure of any kind (refused, timeout, dropped, `isError`, an output over
   * `maxOutputBytes`) is an error result, never a throw.
   */
  async call(
    name: string,
    args: Record<string, unknown>,
    timeoutMs: number,
    maxOutputBytes: number,
    outer: AbortSignal,
  ): Promise<McpCallResult> {
    const signal = AbortSignal.any([outer, this.guard.trip.signal]);
    try {
      const result = await withTimeout(
        this.client.callTool({ name, arguments: args }, undefined, { timeout: timeoutMs, signal }),
        timeoutMs,
        signal,
      );
      const text = resultText(
        result as { content?: unknown; structuredContent?: unknown; toolResult?: unknown },
      );
      if (Buffer.byteLength(text) > maxOutputBytes) return { error: outputTooLarge(maxOutputBytes) };
      if ((result as { isError?: unknown }).isError === true)
        return { error: text || 'The tool reported an error.' };
      return { output: text };
    } catch (err) {
      if (outer.aborted) return { error: 'The tool call was aborted.' };
      if (this.guard.trip.signal.aborted) return { error: outputTooLarge(maxOutputBytes) };
      if (err instanceof McpError && !sdkTimeout(err)) return { error: describe(err) };
      return { error: `The MCP server ${explain(err, this.guard).reason}.` };
    }
  }

  async close(): Promise<void> {
    // Sockets first: a call in flight is abandoned at once, whatever the transport's close does.
    await Promise.allSettled([
      this.agent.destroy(),
      withTimeout(this.client.close(), 2_000, new AbortController().signal),
    ]);
  }
}

/** The error of an `mcp_call` whose output was over the bound (its code first, for clients to match). */
export function outputTooLarge(limit: number): string {
  return `mcp_output_too_large: the tool's output is larger than ${limit} bytes (mcp.maxOutputBytes); it was cut.`;
}

/** Whether a JSON value nests objects and arrays deeper than `limit` (iterative: any depth is safe). */
function deeperThan(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [next, depth] = stack.pop()!;
    if (typeof next !== 'object' || next === null) continue;
    if (depth > limit) return true;
    for (const child of Object.values(next)) stack.push([child, depth + 1]);
  }
  return false;
}

/** The text of a tool result: its text parts joined, else its structured content as JSON. */
function resultText(result: {
  content?: unknown;
  structuredContent?: unknown;
  toolResult?: unknown;
}): string {
  if (Array.isArray(result.content)) {
    const parts = result.content.map((part: { type?: unknown; text?: unknown }) =>
      part?.type === 'text' && typeof part.text === 'string' ? part.text : JSON.stringify(part),
    );
    if (parts.length > 0) return parts.join('\n');
  }
  if (result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  if (result.toolResult !== undefined) return JSON.stringify(result.toolResult);
  return '';
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
function sdkTimeout(err: unknown): McpTimeout | undefined {
  if (!(err instanceof McpError) || err.code !== ErrorCode.RequestTimeout) return undefined;
  const ms = (err.data as { timeout?: unknown } | undefined)?.timeout;
  return typeof ms === 'number' ? new McpTimeout(ms) : undefined;
}

/**
 * What failed, in words that carry nothing the server said: a timeout, a message over the bound,
 * a redirect, a dropped connection, an HTTP status, a network error's code, an MCP error's code,
 * or "not an MCP server".
 */
function explain(err: unknown, guard: Guard): McpFailure {
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

/**
 * Cuts a body past `limit` bytes in one message: an event-stream counts the bytes of each event
 * (from one blank line to the next), anything else its whole body. Cutting errors the stream
 * (which cancels the fetch and its socket) and trips the connection's guard.
 */
function messageLimit(
  limit: number,
  eventStream: boolean,
  guard: Guard,
): TransformStream<Uint8Array, Uint8Array> {
  let size = 0;
  let atLineStart = true;
  let afterCr = false;
  return new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      if (!eventStream || (chunk.indexOf(0x0a) < 0 && chunk.indexOf(0x0d) < 0)) {
        size += chunk.byteLength;
        if (chunk.byteLength > 0 && eventStream) {
          atLineStart = false;
          afterCr = false;
        }
      } else {
        for (let i = 0; i < chunk.length; i++) {
          const byte = chunk[i]!;
          if (byte === 0x0a && afterCr) {
            afterCr = false;
            continue;
          }
          afterCr = byte === 0x0d;
          if (byte === 0x0a || byte === 0x0d) {
            if (atLineStart)
              size = 0; // a blank line: the event ended
            else atLineStart = true;
          } else {
            atLineStart = false;
            size++;
          }
        }
      }
      if (size > limit) {
        const err = new McpMessageTooLarge(limit);
        guard.trip.abort(err);
        controller.error(err);
        return;
      }
      controller.enqueue(chunk);
    },
  });
}

/**
 * The fetch of one connection: through its own agent (pinned to the checked address), with the
 * request's headers on every request (the SSE transport's GET stream does not take
 * `requestInit`). A redirect is refused; the body of an answer that is not a success is dropped
 * unread (the SDK would put it in its error messages); every other body is read within the
 * message bound.
 */
function boundedFetch(
  agent: Agent,
  headers: Record<string, string>,
  guard: Guard,
  maxMessageBytes: number,
): typeof fetch {
  return (async (url: string | URL, init?: RequestInit) => {
    const merged = new Headers(init?.headers);
    for (const [name, value] of Object.entries(headers)) merged.set(name, value);
    const response = await undiciFetch(url, {
      ...(init as Parameters<typeof undiciFetch>[1]),
      headers: Object.fromEntries(merged),
      redirect: 'manual',
      dispatcher: agent,
    });
    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel().catch(() => {});
      guard.status = response.status;
      throw new McpRedirect(response.status);
    }
    if (!response.ok) {
      await response.body?.cancel().catch(() => {});
      guard.status = response.status;
      return new UndiciResponse(null, { status: response.status, headers: response.headers });
    }
    if (!response.body) return response;
    const eventStream = /^\s*text\/event-stream\s*(;|$)/i.test(response.headers.get('content-type') ?? '');
    return new UndiciResponse(response.body.pipeThrough(messageLimit(maxMessageBytes, eventStream, guard)), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  }) as unknown as typeof fetch;
}

export class McpTimeout extends Error {
  constructor(readonly ms: number) {
    super(`The MCP server did not answer within ${ms} ms.`);
    this.name = 'McpTimeout';
  }
}

/** Races a promise against a timeout and an abort signal (the SDK's own timeout does not cover connect). */
function withTimeout<T>(promise: Promise<T>, ms: number, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => done(() => reject(new McpTimeout(ms))), ms);
    const onAbort = () => done(() => reject(signal.reason ?? new Error('aborted')));
    const done = (fn: () => void) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      fn();
    };
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => done(() => resolve(value)),
      (err: unknown) => done(() => reject(err)),
    );
  });
}
