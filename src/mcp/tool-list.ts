import { McpFailure } from './failures.js';

/** A tool an MCP server lists, as the gateway offers it to the engine. */
export interface McpTool {
  name: string;
  description?: string | undefined;
  inputSchema: Record<string, unknown>;
  annotations?: Record<string, unknown> | undefined;
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
 * What the gateway keeps of one listed tool, within the bounds: a schema or annotations nested
 * deeper, or a definition larger, than allowed fails the listing (an McpFailure).
 */
export function keptTool(
  tool: { name: string; description?: string | undefined; inputSchema: unknown; annotations?: unknown },
  limits: McpListLimits,
): McpTool {
  const inputSchema = tool.inputSchema as Record<string, unknown>;
  const annotations = tool.annotations as Record<string, unknown> | undefined;
  if (deeperThan(inputSchema, limits.maxSchemaDepth) || deeperThan(annotations, limits.maxSchemaDepth))
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
  return kept;
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
