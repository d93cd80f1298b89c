import { newId } from '../ids.js';
import type { ResponseBuilder } from '../response-builder.js';
import type { McpListToolsItem } from '../types.js';
import type { Approved, McpServer } from './types.js';

/** The `mcp_list_tools` item of a server: the tools it listed that the request allows. */
export function listToolsItem(server: McpServer): McpListToolsItem {
  return {
    id: newId('mcpl'),
    type: 'mcp_list_tools',
    status: 'completed',
    server_label: server.label,
    tools: server.tools.map((tool) => ({
      name: tool.name,
      description: tool.description ?? null,
      input_schema: tool.inputSchema,
      annotations: tool.annotations ?? null,
    })),
    error: null,
  };
}

/** The tool list items and the approved calls, shown before the first engine turn's events. */
export function showPrelude(
  builder: ResponseBuilder,
  listItems: readonly McpListToolsItem[],
  approved: readonly Approved[],
): void {
  for (const listed of listItems) {
    const shown: McpListToolsItem = { ...listed, status: 'in_progress', tools: [] };
    const index = builder.addItem(shown);
    builder.emit({ type: 'response.mcp_list_tools.in_progress', item_id: shown.id, output_index: index });
    shown.tools = listed.tools;
    shown.status = 'completed';
    builder.emit({ type: 'response.mcp_list_tools.completed', item_id: shown.id, output_index: index });
    builder.emit({ type: 'response.output_item.done', output_index: index, item: shown });
  }
  for (const { item, result } of approved) {
    const index = builder.addItem(item);
    builder.emit({ type: 'response.mcp_call.in_progress', item_id: item.id, output_index: index });
    builder.emit({
      type: 'response.mcp_call_arguments.done',
      item_id: item.id,
      output_index: index,
      arguments: item.arguments,
    });
    builder.trackMcpCall(item, index);
    builder.mcpCallDone(item.id, result);
  }
}
