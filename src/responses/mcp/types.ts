import type { SluiceConfig } from '../../config/schema.js';
import type { CheckedTarget } from '../../mcp/address.js';
import type { McpTool } from '../../mcp/tool-list.js';
import type { McpCallResult } from '../../mcp/tool-result.js';
import type { McpToolRequest } from '../request-schema.js';
import type { McpCallItem } from '../types.js';

/** The `mcp` settings (config `mcp:`). */
export type McpSettings = SluiceConfig['mcp'];

/** An MCP server of a request, checked and listed: what its tool calls need. */
export interface McpServer {
  label: string;
  url: string;
  /** Sent to this server only; never stored, echoed or logged. */
  headers: Record<string, string>;
  /** The address its host resolved to and passed the check: every connection goes there. */
  target: CheckedTarget;
  tools: McpTool[];
  approval: McpToolRequest['require_approval'];
}

/** A call the client approved, made before the first engine turn, and what it gave. */
export interface Approved {
  item: McpCallItem;
  result: McpCallResult;
}
