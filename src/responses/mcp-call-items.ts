/** MCP call items: opened for a routed tool call, then being made by the gateway until their result. */
import type { EventSequence } from './event-sequence.js';
import { newId } from './ids.js';
import type { ItemStatus, McpApprovalRequestItem, McpCallItem } from './types.js';

/** Where a tool call of the engine goes when it names an MCP server's tool. */
export interface McpRoute {
  serverLabel: string;
  toolName: string;
  /** The client approves the call first: it is shown as an `mcp_approval_request`. */
  approval: boolean;
}

interface RunningCall {
  item: McpCallItem;
  index: number;
}

/** MCP calls being made, by item id; saved to retract a terminal draft. */
export type RunningMcpCallsSaved = ReadonlyMap<string, RunningCall>;

/** The item a tool call routed to an MCP tool opens: an `mcp_call`, or an `mcp_approval_request`. */
export function newMcpItem(route: McpRoute): McpCallItem | McpApprovalRequestItem {
  if (route.approval)
    return {
      id: newId('mcpr'),
      type: 'mcp_approval_request',
      status: 'in_progress',
      server_label: route.serverLabel,
      name: route.toolName,
      arguments: '',
    };
  return {
    id: newId('mcp'),
    type: 'mcp_call',
    status: 'in_progress',
    server_label: route.serverLabel,
    name: route.toolName,
    arguments: '',
    output: null,
    error: null,
    approval_request_id: null,
  };
}

/** `response.mcp_call_arguments.done`: the call's arguments are complete. */
export function mcpArgumentsDone(events: EventSequence, item: McpCallItem, index: number): void {
  events.emit({
    type: 'response.mcp_call_arguments.done',
    item_id: item.id,
    output_index: index,
    arguments: item.arguments,
  });
}

/**
 * MCP calls whose arguments are complete, being made by the gateway: open until `done()`
 * (`mcp_call.completed` or `.failed`, then `output_item.done`); closed by `closeAll()` if the
 * response ends meanwhile.
 */
export class RunningMcpCalls {
  private readonly running = new Map<string, RunningCall>();

  constructor(private readonly events: EventSequence) {}

  track(item: McpCallItem, index: number): void {
    this.running.set(item.id, { item, index });
  }

  /** An MCP call ended: `response.mcp_call.completed` (or `.failed`), then its `output_item.done`. */
  done(itemId: string, result: { output?: string | undefined; error?: string | undefined }): void {
    const open = this.running.get(itemId);
    if (!open) return;
    this.running.delete(itemId);
    const { item, index } = open;
    if (result.error !== undefined) {
      item.error = result.error;
      item.status = 'failed';
    } else {
      item.output = result.output ?? '';
      item.status = 'completed';
    }
    this.events.emit({
      type: item.status === 'failed' ? 'response.mcp_call.failed' : 'response.mcp_call.completed',
      item_id: item.id,
      output_index: index,
    });
    this.events.emit({ type: 'response.output_item.done', output_index: index, item });
  }

  /** Closes every call still being made with `status` (its `output_item.done`). */
  closeAll(status: ItemStatus): void {
    for (const [id, { item, index }] of [...this.running]) {
      this.running.delete(id);
      item.status = status;
      this.events.emit({ type: 'response.output_item.done', output_index: index, item });
    }
  }

  save(): RunningMcpCallsSaved {
    return new Map(this.running);
  }

  restore(saved: RunningMcpCallsSaved): void {
    this.running.clear();
    for (const [key, open] of saved) this.running.set(key, open);
  }
}
