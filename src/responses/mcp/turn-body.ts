import type { ChatMessage } from '../to-chat.js';
import type { McpBounds } from './bounds.js';
import type { McpToolNames } from './tool-names.js';

/**
 * The chat body of each engine turn of a response: the first turn's body as the service made it,
 * with the MCP tools added while the bounds allow them; the next turns' the same with the
 * conversation so far.
 */
export class TurnBodies {
  private base: Record<string, unknown> = {};
  private functionTools: unknown[] = [];

  constructor(
    private readonly names: McpToolNames,
    private readonly bounds: McpBounds,
  ) {}

  /** Adds the MCP tools (within the bounds) to the first turn's chat body, and keeps it for the next turns. */
  decorate(body: Record<string, unknown>): void {
    this.base = body;
    this.functionTools = Array.isArray(body.tools) ? body.tools : [];
    this.setTools(body);
  }

  /** The chat body of the next turn: the conversation so far, MCP tools only within the bounds. */
  next(messages: ChatMessage[]): Record<string, unknown> {
    this.bounds.turn++;
    const body: Record<string, unknown> = { ...this.base, messages };
    this.setTools(body);
    return body;
  }

  private setTools(body: Record<string, unknown>): void {
    const mcp = this.bounds.offered() ? this.names.chatTools() : [];
    const tools = [...this.functionTools, ...mcp];
    if (mcp.length === 0) relaxToolChoice(body, this.functionTools);
    if (tools.length > 0) body.tools = tools;
    else {
      // Past a bound with no function tool of its own: the engine must answer.
      delete body.tools;
      delete body.tool_choice;
      delete body.parallel_tool_calls;
    }
  }
}

/**
 * A `tool_choice` that the MCP tools no longer meet once they are gone: one naming a tool that is
 * no longer offered becomes "none", "required" becomes "auto", so that the engine answers.
 */
function relaxToolChoice(body: Record<string, unknown>, functionTools: readonly unknown[]): void {
  const choice = body.tool_choice;
  if (choice === 'required') body.tool_choice = 'auto';
  else if (typeof choice === 'object' && choice !== null) {
    const name = (choice as { function?: { name?: unknown } }).function?.name;
    const offered = functionTools.some(
      (tool) => (tool as { function?: { name?: unknown } } | null)?.function?.name === name,
    );
    if (!offered) body.tool_choice = 'none';
  }
}
