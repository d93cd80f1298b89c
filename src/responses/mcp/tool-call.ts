import { originOf } from '../../mcp/address.js';
import { McpConnection } from '../../mcp/connection.js';
import { describe, McpFailure } from '../../mcp/failures.js';
import type { McpCallResult } from '../../mcp/tool-result.js';
import type { Logger } from '../../observability/logger.js';
import type { McpCallItem } from '../types.js';
import type { McpBounds } from './bounds.js';
import type { McpServer, McpSettings } from './types.js';

/** Calls the MCP tools of one response, within its bounds. */
export class McpToolCaller {
  constructor(
    private readonly servers: readonly McpServer[],
    private readonly bounds: McpBounds,
    private readonly settings: McpSettings,
    private readonly maxMessageBytes: number,
    private readonly log: Logger | undefined,
  ) {}

  /**
   * Calls one MCP tool within the bounds; every failure is an error result. `connections` holds
   * the connections to reuse, by server label: the caller closes them.
   */
  async call(
    item: McpCallItem,
    connections: Map<string, McpConnection>,
    signal: AbortSignal,
  ): Promise<McpCallResult> {
    const found = this.servers.find((s) => s.label === item.server_label);
    if (!found) return { error: `Unknown MCP server '${item.server_label}'.` };
    if (this.bounds.callsMade >= this.bounds.maxCalls)
      return { error: 'The limit of MCP tool calls for this response was reached; answer without tools.' };
    const remaining = this.bounds.deadline - Date.now();
    if (remaining <= 0)
      return { error: 'The time allowed for MCP tool calls in this response is over; answer without tools.' };
    this.bounds.callsMade++;
    let args: unknown;
    try {
      args = item.arguments.trim() === '' ? {} : JSON.parse(item.arguments);
    } catch {
      return { error: 'The arguments are not valid JSON.' };
    }
    if (typeof args !== 'object' || args === null || Array.isArray(args))
      return { error: 'The arguments must be a JSON object.' };
    const timeout = Math.min(this.settings.callTimeoutMs, remaining);
    let connection = connections.get(found.label);
    if (!connection) {
      try {
        connection = await McpConnection.open(found.url, {
          headers: found.headers,
          timeoutMs: timeout,
          signal,
          target: found.target,
          maxMessageBytes: this.maxMessageBytes,
        });
      } catch (err) {
        if (err instanceof McpFailure) return { error: `Could not connect: the MCP server ${err.reason}.` };
        return { error: `Could not connect to the MCP server: ${describe(err)}` };
      }
      connections.set(found.label, connection);
    }
    const started = performance.now();
    const result = await connection.call(
      item.name,
      args as Record<string, unknown>,
      timeout,
      this.settings.maxOutputBytes,
      signal,
    );
    this.log?.debug(
      {
        serverLabel: found.label,
        origin: originOf(found.url),
        tool: item.name,
        ok: result.error === undefined,
        ms: Math.round(performance.now() - started),
      },
      'MCP tool call',
    );
    if (result.error !== undefined) {
      // The next call connects again (the server may have dropped the connection).
      connections.delete(found.label);
      void connection.close();
    }
    return result;
  }
}
