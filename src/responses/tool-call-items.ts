/** The tool calls the engine streams: function calls for the client, MCP calls and approval requests. */
import type { EventSequence } from './event-sequence.js';
import { newId } from './ids.js';
import { type McpRoute, mcpArgumentsDone, newMcpItem, type RunningMcpCalls } from './mcp-call-items.js';
import type { TextItems } from './message-and-reasoning-items.js';
import type { FunctionCallItem, ItemStatus, McpApprovalRequestItem, McpCallItem } from './types.js';

/** A tool call's fragment in a chat-completions delta. */
export interface ToolCallDelta {
  index?: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}

/** A tool call being streamed: a function call for the client, or an MCP call the gateway makes. */
export type CallItem = FunctionCallItem | McpCallItem | McpApprovalRequestItem;

/** Claims the tool calls of MCP tools by their function name (see responses/mcp-loop.ts). */
export interface ToolCallRouter {
  route(name: string): McpRoute | undefined;
}

/** A tool call of a finished turn, as `endTurn()` hands it over. */
export interface TurnCall {
  item: CallItem;
  index: number;
  /** The engine's id of the call (the chat `tool_call_id`). */
  callId: string;
}

/** The open tool calls by the engine's index; saved to retract a terminal draft. */
export type OpenCallsSaved = ReadonlyMap<number, TurnCall>;

/**
 * The tool calls of a response as the engine streams them: each opens an item (a function call,
 * or, when the router claims it, an MCP call or approval request), its argument fragments are
 * appended (and shown as deltas), and it closes with its arguments done and `output_item.done`.
 */
export class ToolCallItems {
  private readonly open = new Map<number, TurnCall>();

  constructor(
    private readonly events: EventSequence,
    private readonly texts: TextItems,
    private readonly mcp: RunningMcpCalls,
  ) {}

  delta(delta: ToolCallDelta, router: ToolCallRouter | undefined): void {
    const key = typeof delta.index === 'number' ? delta.index : 0;
    let open = this.open.get(key);
    if (!open) {
      this.texts.closeBoth('completed');
      for (const other of this.open.keys()) this.close(other, 'completed');
      const callId = delta.id ?? newId('call');
      const name = delta.function?.name ?? '';
      const route = name ? router?.route(name) : undefined;
      const item: CallItem = route
        ? newMcpItem(route)
        : {
            id: newId('fc'),
            type: 'function_call',
            status: 'in_progress',
            arguments: '',
            call_id: callId,
            name,
          };
      open = { item, index: this.events.addItem(item), callId };
      this.open.set(key, open);
      if (item.type === 'mcp_call')
        this.events.emit({
          type: 'response.mcp_call.in_progress',
          item_id: item.id,
          output_index: open.index,
        });
    } else if (delta.function?.name && !open.item.name && open.item.type === 'function_call') {
      open.item.name = delta.function.name;
    }
    const fragment = delta.function?.arguments;
    if (typeof fragment === 'string' && fragment.length > 0) {
      open.item.arguments += fragment;
      // An approval request is shown whole, when it is done.
      if (open.item.type !== 'mcp_approval_request')
        this.events.emit({
          type:
            open.item.type === 'mcp_call'
              ? 'response.mcp_call_arguments.delta'
              : 'response.function_call_arguments.delta',
          item_id: open.item.id,
          output_index: open.index,
          delta: fragment,
        });
    }
  }

  /**
   * Ends an engine turn: closes its text, reasoning and function calls as completed and returns
   * its tool calls. MCP calls get their `mcp_call_arguments.done` and go on running.
   */
  endTurn(): TurnCall[] {
    this.texts.closeBoth('completed');
    const calls: TurnCall[] = [];
    for (const [key, open] of [...this.open]) {
      calls.push({ item: open.item, index: open.index, callId: open.callId });
      if (open.item.type === 'mcp_call') {
        this.open.delete(key);
        mcpArgumentsDone(this.events, open.item, open.index);
        this.mcp.track(open.item, open.index);
      } else this.close(key, 'completed');
    }
    return calls;
  }

  /** Closes every open call with `status`. */
  closeAll(status: ItemStatus): void {
    for (const key of [...this.open.keys()]) this.close(key, status);
  }

  /** Opens again a call of a response stored mid-way (keyed apart from the engine's indexes). */
  reopen(item: CallItem, index: number): void {
    this.open.set(-1 - index, { item, index, callId: '' });
  }

  save(): OpenCallsSaved {
    return new Map(this.open);
  }

  restore(saved: OpenCallsSaved): void {
    this.open.clear();
    for (const [key, open] of saved) this.open.set(key, open);
  }

  private close(key: number, status: ItemStatus): void {
    const open = this.open.get(key);
    if (!open) return;
    this.open.delete(key);
    const { item, index } = open;
    if (item.type === 'mcp_call') mcpArgumentsDone(this.events, item, index);
    else if (item.type === 'function_call')
      this.events.emit({
        type: 'response.function_call_arguments.done',
        item_id: item.id,
        output_index: index,
        name: item.name,
        arguments: item.arguments,
      });
    item.status = status;
    this.events.emit({ type: 'response.output_item.done', output_index: index, item });
  }
}
