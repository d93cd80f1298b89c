/**
 * The bounds of one response's MCP work: the tool calls made against `maxCalls`, the engine turn
 * against `maxTurns`, and the deadline (`mcp.totalTimeoutMs` from when the response was prepared).
 */
export class McpBounds {
  callsMade = 0;
  /** The engine turn being prepared or run (0: the first). */
  turn = 0;
  readonly deadline: number;

  constructor(
    readonly maxCalls: number,
    /** Most engine turns of the response: the last one is offered no MCP tool, past it the response is incomplete. */
    readonly maxTurns: number,
    totalTimeoutMs: number,
  ) {
    this.deadline = Date.now() + totalTimeoutMs;
  }

  /** Whether the turn being prepared is offered the MCP tools: within the calls, the time, and before the last turn. */
  offered(): boolean {
    return this.callsMade < this.maxCalls && Date.now() < this.deadline && this.turn < this.maxTurns - 1;
  }
}
