import { ClientDisconnected } from '../../errors/http-errors.js';
import { McpListToolsFailed, McpServerAddressRefused } from '../../errors/mcp-errors.js';
import { type CheckedTarget, originOf, resolveServer } from '../../mcp/address.js';
import type { McpAllowlist } from '../../mcp/allowlist.js';
import { McpConnection } from '../../mcp/connection.js';
import { describe, McpFailure } from '../../mcp/failures.js';
import type { McpTool } from '../../mcp/tool-list.js';
import type { Logger } from '../../observability/logger.js';
import type { McpToolRequest } from '../request-schema.js';
import type { McpSettings } from './types.js';

/** The checked address of a server's host (400 when it may not lead there, 424 when it does not resolve). */
export async function resolveTarget(
  def: McpToolRequest,
  allowlist: McpAllowlist,
  log: Logger | undefined,
  signal: AbortSignal,
): Promise<CheckedTarget> {
  let resolved: Awaited<ReturnType<typeof resolveServer>>;
  try {
    resolved = await resolveServer(new URL(def.server_url), allowlist.namesHostOf(def.server_url));
  } catch (err) {
    if (signal.aborted) throw new ClientDisconnected();
    const code = (err as { code?: unknown }).code;
    throw new McpListToolsFailed(
      def.server_label,
      `its host could not be resolved${typeof code === 'string' ? ` (${code})` : ''}.`,
    );
  }
  if (!resolved.ok) {
    log?.warn(
      { serverLabel: def.server_label, origin: originOf(def.server_url), kind: resolved.kind },
      'MCP server URL refused: its address is not allowed',
    );
    throw new McpServerAddressRefused(def.server_label, resolved.kind);
  }
  return resolved.target;
}

/** Lists a server's tools within the bounds (`mcp.listTimeoutMs` for all of it); 424 when it cannot. */
export async function listServerTools(
  def: McpToolRequest,
  headers: Record<string, string>,
  target: CheckedTarget,
  gateway: { settings: McpSettings; maxMessageBytes: number; log: Logger | undefined },
  signal: AbortSignal,
): Promise<McpTool[]> {
  const s = gateway.settings;
  const listing = new AbortController();
  const timer = setTimeout(
    () =>
      listing.abort(
        new McpFailure(`did not list its tools within ${s.listTimeoutMs} ms (mcp.listTimeoutMs)`, 'timeout'),
      ),
    s.listTimeoutMs,
  );
  const bound = AbortSignal.any([signal, listing.signal]);
  let connection: McpConnection | undefined;
  try {
    connection = await McpConnection.open(def.server_url, {
      headers,
      timeoutMs: Math.min(s.callTimeoutMs, s.listTimeoutMs),
      signal: bound,
      target,
      maxMessageBytes: gateway.maxMessageBytes,
    });
    return await connection.listTools(
      {
        maxPages: s.maxListPages,
        maxTools: s.maxToolsPerServer,
        maxToolBytes: s.maxToolBytes,
        maxSchemaDepth: s.maxToolSchemaDepth,
        pageTimeoutMs: s.callTimeoutMs,
      },
      bound,
    );
  } catch (err) {
    if (signal.aborted) throw new ClientDisconnected();
    const failure =
      listing.signal.reason instanceof McpFailure
        ? listing.signal.reason
        : err instanceof McpFailure
          ? err
          : new McpFailure('did not answer as an MCP server', describe(err));
    // Never the headers; the server by its label and origin only.
    gateway.log?.warn(
      {
        serverLabel: def.server_label,
        origin: originOf(def.server_url),
        reason: failure.reason,
        detail: failure.detail,
      },
      'MCP server could not list its tools',
    );
    // What failed, never what the server answered.
    throw new McpListToolsFailed(def.server_label, `it ${failure.reason}.`);
  } finally {
    clearTimeout(timer);
    void connection?.close();
  }
}

/** Whether a request's `allowed_tools` lets a listed tool through. */
export function allowedBy(filter: NonNullable<McpToolRequest['allowed_tools']>, tool: McpTool): boolean {
  if (Array.isArray(filter)) return filter.includes(tool.name);
  if (filter.tool_names?.includes(tool.name)) return true;
  return filter.read_only === true && tool.annotations?.readOnlyHint === true;
}
