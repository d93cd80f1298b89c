import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ListToolsResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { Agent } from 'undici';
import { type CheckedTarget, pinnedLookup } from './address.js';
import { boundedFetch } from './bounded-fetch.js';
import { describe, explain, type Guard, McpFailure, sdkTimeout } from './failures.js';
import { withTimeout } from './timeout.js';
import { keptTool, type McpListLimits, type McpTool } from './tool-list.js';
import { type McpCallResult, outputTooLarge, resultText } from './tool-result.js';

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
          tools.push(keptTool(tool, limits));
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
