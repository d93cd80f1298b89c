import type { ResumableStream } from '../../dispatch/resumable-stream.js';
import type { Logger } from '../../observability/logger.js';
import type { ResponseRun, RunEnd } from '../response-run.js';
import type { ChatMessage } from '../to-chat.js';
import type { ToolCallRouter } from '../tool-call-items.js';
import type { InputItem, McpListToolsItem, OutputItem } from '../types.js';
import { answerApprovals, type CheckedApproval, checkApprovals, needsApproval } from './approvals.js';
import { McpBounds } from './bounds.js';
import { listToolsItem, showPrelude } from './prelude.js';
import { McpToolCaller } from './tool-call.js';
import { type LoopHost, runToolLoop } from './tool-loop.js';
import { McpToolNames } from './tool-names.js';
import { TurnBodies } from './turn-body.js';
import type { Approved, McpServer, McpSettings } from './types.js';

/**
 * The MCP part of one response: the servers and their tools, the names the engine knows them
 * by, and the bounds (calls made, engine turns, the deadline). `run` drives the tool loop.
 */
export class McpSession implements ToolCallRouter {
  private readonly names: McpToolNames;
  private readonly listItems: McpListToolsItem[];
  private readonly approved: Approved[] = [];
  /** Chat messages the approvals add after the request's own. */
  readonly messages: ChatMessage[] = [];
  private readonly bounds: McpBounds;
  private readonly caller: McpToolCaller;
  private readonly bodies: TurnBodies;

  constructor(
    servers: McpServer[],
    settings: McpSettings,
    maxMessageBytes: number,
    log: Logger | undefined,
    maxCalls: number,
    /** Most engine turns of the response: the last one is offered no MCP tool, past it the response is incomplete. */
    maxTurns: number,
    functionNames: readonly string[],
  ) {
    this.bounds = new McpBounds(maxCalls, maxTurns, settings.totalTimeoutMs);
    this.names = new McpToolNames(servers, functionNames);
    this.listItems = servers.map(listToolsItem);
    this.caller = new McpToolCaller(servers, this.bounds, settings, maxMessageBytes, log);
    this.bodies = new TurnBodies(this.names, this.bounds);
  }

  route(name: string): { serverLabel: string; toolName: string; approval: boolean } | undefined {
    const found = this.names.find(name);
    if (!found) return undefined;
    return {
      serverLabel: found.server.label,
      toolName: found.tool.name,
      approval: needsApproval(found.server.approval, found.tool.name),
    };
  }

  /** Checks every approval answer before any call is made (see approvals.ts). */
  checkApprovals(
    answers: readonly InputItem[],
    history: readonly (InputItem | OutputItem)[],
    used: { has(id: string): boolean },
  ): { checked: CheckedApproval[]; ids: string[] } {
    return checkApprovals(answers, history, used, this.names);
  }

  /** Makes the calls the client approved (before the first engine turn) and notes the denied ones. */
  answerApprovals(approvals: readonly CheckedApproval[], signal: AbortSignal): Promise<void> {
    return answerApprovals(approvals, this.caller, signal, {
      messages: this.messages,
      approved: this.approved,
    });
  }

  /** Adds the MCP tools (within the bounds) to the first turn's chat body, and keeps it for the next turns. */
  decorate(body: Record<string, unknown>): void {
    this.bodies.decorate(body);
  }

  /** The tool loop of the response (see tool-loop.ts), from its first engine turn. */
  run(run: ResponseRun, first: ResumableStream, host: LoopHost, messages: ChatMessage[]): Promise<RunEnd> {
    return runToolLoop(
      {
        router: this,
        prelude: (builder) => showPrelude(builder, this.listItems, this.approved),
        names: this.names,
        bounds: this.bounds,
        caller: this.caller,
        bodies: this.bodies,
      },
      run,
      first,
      host,
      messages,
    );
  }
}
