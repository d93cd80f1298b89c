import type { McpToolRequest } from '../request-schema.js';

/** The tool definition as the response echoes and stores it: never its headers or authorization. */
export function echoMcpTool(tool: McpToolRequest): Record<string, unknown> {
  const { headers: _headers, authorization: _authorization, ...rest } = tool;
  return {
    ...rest,
    server_description: tool.server_description ?? null,
    allowed_tools: tool.allowed_tools ?? null,
    require_approval: tool.require_approval ?? 'always',
    headers: null,
  };
}
