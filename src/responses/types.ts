/**
 * The objects of the Responses API that sluice produces, as OpenAI and the Open Responses
 * specification shape them. Only what sluice emits is typed; clients' extra fields pass through.
 */

export type ItemStatus = 'in_progress' | 'completed' | 'incomplete';

export interface OutputText {
  type: 'output_text';
  text: string;
  annotations: unknown[];
  logprobs: unknown[];
}

export interface ReasoningText {
  type: 'reasoning_text';
  text: string;
}

export interface MessageItem {
  id: string;
  type: 'message';
  status: ItemStatus;
  role: 'assistant';
  content: OutputText[];
}

export interface FunctionCallItem {
  id: string;
  type: 'function_call';
  status: ItemStatus;
  arguments: string;
  call_id: string;
  name: string;
}

export interface ReasoningItem {
  id: string;
  type: 'reasoning';
  status: ItemStatus;
  summary: unknown[];
  content: ReasoningText[];
}

/** The tools an MCP server listed (`mcp_list_tools`). */
export interface McpListToolsItem {
  id: string;
  type: 'mcp_list_tools';
  status: ItemStatus;
  server_label: string;
  tools: { name: string; description: string | null; input_schema: unknown; annotations: unknown }[];
  error: string | null;
}

/** A call of an MCP server's tool made by the gateway (`mcp_call`). */
export interface McpCallItem {
  id: string;
  type: 'mcp_call';
  status: ItemStatus | 'calling' | 'failed';
  server_label: string;
  name: string;
  arguments: string;
  output: string | null;
  error: string | null;
  approval_request_id: string | null;
}

/** A call waiting for the client's approval (`mcp_approval_request`); answered by `mcp_approval_response`. */
export interface McpApprovalRequestItem {
  id: string;
  type: 'mcp_approval_request';
  status: ItemStatus;
  server_label: string;
  name: string;
  arguments: string;
}

export type McpItem = McpListToolsItem | McpCallItem | McpApprovalRequestItem;

export type OutputItem = MessageItem | FunctionCallItem | ReasoningItem | McpItem;

/** An input item as stored (normalised, with an id). */
export interface InputItem {
  id: string;
  type: string;
  [field: string]: unknown;
}

export type ResponseStatus = 'queued' | 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export interface ResponseObject {
  id: string;
  object: 'response';
  created_at: number;
  status: ResponseStatus;
  background: boolean;
  completed_at: number | null;
  error: { code: string; message: string } | null;
  incomplete_details: { reason: string } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  model: string;
  output: OutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  conversation: { id: string } | null;
  reasoning: { effort: string | null; summary: string | null };
  store: boolean;
  temperature: number | null;
  text: { format: Record<string, unknown> };
  tool_choice: unknown;
  tools: unknown[];
  top_p: number | null;
  truncation: 'auto' | 'disabled';
  presence_penalty: number;
  frequency_penalty: number;
  top_logprobs: number;
  max_tool_calls: number | null;
  service_tier: string;
  safety_identifier: string | null;
  prompt_cache_key: string | null;
  usage: ResponseUsage | null;
  user: string | null;
  metadata: Record<string, string>;
}

/** A streaming event before it is numbered. */
export interface ResponseEventBody {
  type: string;
  [field: string]: unknown;
}
