import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Agent, fetch as undiciFetch } from 'undici';

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

/**
 * One connection to an MCP server, made with the official SDK client: Streamable HTTP first,
 * then the older HTTP+SSE transport when the server does not speak it. The request's headers go
 * to this server only; redirects are refused (they could lead outside the allowlist).
 */
export class McpConnection {
  private constructor(
    private readonly client: Client,
    private readonly agent: Agent,
    readonly url: string,
  ) {}

  static async open(
    url: string,
    headers: Record<string, string>,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<McpConnection> {
    const requestInit: RequestInit = { headers, redirect: 'error' };
    // Its own connection pool: closing the connection destroys its sockets, which is what tells a
    // server that a call in flight was abandoned (an aborted fetch may hold its socket until the next byte).
    const agent = new Agent({ connections: 4 });
    const fetch = agentFetch(agent, headers);
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
      return new McpConnection(streamable, agent, url);
    } catch (first) {
      await streamable.close().catch(() => {});
      // The older HTTP+SSE transport only for a server that answered Streamable HTTP with a 4xx
      // (the MCP specification's backwards compatibility); never after a timeout or a refusal.
      const old =
        first instanceof StreamableHTTPError &&
        first.code !== undefined &&
        first.code >= 400 &&
        first.code < 500;
      if (signal.aborted || !old) {
        void agent.destroy().catch(() => {});
        throw first;
      }
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
        return new McpConnection(sse, agent, url);
      } catch {
        await sse.close().catch(() => {});
        void agent.destroy().catch(() => {});
        throw first;
      }
    }
  }

  async listTools(timeoutMs: number, signal: AbortSignal): Promise<McpTool[]> {
    const tools: McpTool[] = [];
    let cursor: string | undefined;
    // Bounded: a server that pages forever is cut after 20 pages.
    for (let page = 0; page < 20; page++) {
      const listed = await this.client.listTools(cursor === undefined ? {} : { cursor }, {
        timeout: timeoutMs,
        signal,
      });
      for (const tool of listed.tools) {
        tools.push({
          name: tool.name,
          description: tool.description,
          inputSchema: tool.inputSchema as Record<string, unknown>,
          ...(tool.annotations ? { annotations: tool.annotations as Record<string, unknown> } : {}),
        });
      }
      cursor = listed.nextCursor;
      if (!cursor) break;
    }
    return tools;
  }

  /** Calls a tool; a failure of any kind (refused, timeout, dropped, `isError`) is an error result, never a throw. */
  async call(
    name: string,
    args: Record<string, unknown>,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<McpCallResult> {
    try {
      const result = await withTimeout(
        this.client.callTool({ name, arguments: args }, undefined, { timeout: timeoutMs, signal }),
        timeoutMs,
        signal,
      );
      const text = resultText(
        result as { content?: unknown; structuredContent?: unknown; toolResult?: unknown },
      );
      if ((result as { isError?: unknown }).isError === true)
        return { error: text || 'The tool reported an error.' };
      return { output: text };
    } catch (err) {
      if (signal.aborted) return { error: 'The tool call was aborted.' };
      return { error: describe(err) };
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

/** A bounded, single-line description of a failure (no headers, no stack). */
export function describe(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/\s+/g, ' ').slice(0, 500) || 'The MCP server failed.';
}

/**
 * The fetch of one connection: through its own agent, with the request's headers on every
 * request (the SSE transport's GET stream does not take `requestInit`), never following redirects.
 */
function agentFetch(agent: Agent, headers: Record<string, string>): typeof fetch {
  return ((url: string | URL, init?: RequestInit) => {
    const merged = new Headers(init?.headers);
    for (const [name, value] of Object.entries(headers)) merged.set(name, value);
    return undiciFetch(url, {
      ...(init as Parameters<typeof undiciFetch>[1]),
      headers: Object.fromEntries(merged),
      redirect: 'error',
      dispatcher: agent,
    });
  }) as unknown as typeof fetch;
}

export class McpTimeout extends Error {
  constructor(ms: number) {
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
