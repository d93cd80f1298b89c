import type { McpTool } from '../../mcp/tool-list.js';
import type { McpServer } from './types.js';

/** A function tool of a chat-completions body. */
export type ChatTool = {
  type: 'function';
  function: { name: string; description?: string; parameters: unknown };
};

/**
 * The names the engine knows a response's MCP tools by: each tool a function name of its own,
 * unique beside the request's own functions (`label__tool`, then `label__tool_2`, ... on a clash).
 */
export class McpToolNames {
  /** Engine function name → server and tool. */
  private readonly names = new Map<string, { server: McpServer; tool: McpTool }>();
  private readonly engineNames = new Map<string, string>();

  constructor(servers: readonly McpServer[], functionNames: readonly string[]) {
    const taken = new Set(functionNames);
    for (const server of servers) {
      for (const tool of server.tools) {
        let name = functionName(tool.name);
        if (taken.has(name)) name = functionName(`${server.label}__${tool.name}`);
        for (let n = 2; taken.has(name); n++) name = functionName(`${server.label}__${tool.name}_${n}`);
        taken.add(name);
        this.names.set(name, { server, tool });
        this.engineNames.set(`${server.label}\u0000${tool.name}`, name);
      }
    }
  }

  /** The server and tool an engine function name stands for. */
  find(name: string): { server: McpServer; tool: McpTool } | undefined {
    return this.names.get(name);
  }

  /** The function name the engine knows a server's tool by, if it is offered. */
  engineName(serverLabel: string, toolName: string): string | undefined {
    return this.engineNames.get(`${serverLabel}\u0000${toolName}`);
  }

  /** The MCP tools as chat-completions function tools, by their engine names. */
  chatTools(): ChatTool[] {
    return [...this.names].map(([name, { tool }]) => ({
      type: 'function',
      function: {
        name,
        ...(tool.description ? { description: tool.description } : {}),
        parameters: tool.inputSchema ?? { type: 'object', properties: {} },
      },
    }));
  }
}

/** A function name an engine accepts: [A-Za-z0-9_-], at most 64 characters. */
function functionName(name: string): string {
  return name.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64) || 'tool';
}
