/**
 * The Responses API's side of MCP, as the service and the gateway use it; its parts are in
 * `responses/mcp/`: preparing a request's MCP tools (prepare.ts, servers.ts), the approval rules
 * (approvals.ts), one response's MCP part (session.ts) and its tool loop (tool-loop.ts).
 */
export { echoMcpTool } from './mcp/echo.js';
export { McpTools } from './mcp/prepare.js';
export { McpSession } from './mcp/session.js';
export { type LoopHost, MCP_MAX_TURNS } from './mcp/tool-loop.js';
export type { McpSettings } from './mcp/types.js';
