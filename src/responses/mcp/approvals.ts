import { ClientDisconnected } from '../../errors/http-errors.js';
import { McpApprovalRefused } from '../../errors/mcp-errors.js';
import type { McpConnection } from '../../mcp/connection.js';
import type { McpCallResult } from '../../mcp/tool-result.js';
import { newId } from '../ids.js';
import { madeByGateway } from '../provenance.js';
import type { McpToolRequest } from '../request-schema.js';
import { type ChatMessage, mcpResultText } from '../to-chat.js';
import type { InputItem, McpCallItem, OutputItem } from '../types.js';
import type { McpToolCaller } from './tool-call.js';
import type { McpToolNames } from './tool-names.js';
import type { Approved } from './types.js';

/** An approval answer that passed the checks: the request it answers, and the answer. */
export interface CheckedApproval {
  requestId: string;
  label: string;
  name: string;
  args: string;
  engineName: string;
  approve: boolean;
  reason: unknown;
}

/** Whether a server's `require_approval` asks the client before a call of `tool`. */
export function needsApproval(rule: McpToolRequest['require_approval'], tool: string): boolean {
  if (rule === 'never') return false;
  if (rule == null || rule === 'always') return true;
  if (rule.never?.tool_names?.includes(tool)) return false;
  return true;
}

/**
 * Checks every approval answer before any call is made (400 McpApprovalRefused): it must answer
 * an `mcp_approval_request` the gateway made in the previous response chain (an item of a stored
 * or remembered response's output, never one the client sent), for a tool of a server in
 * `tools` that `allowed_tools` still allows, and not one answered before (in the chain, in this
 * request, or in this process).
 */
export function checkApprovals(
  answers: readonly InputItem[],
  history: readonly (InputItem | OutputItem)[],
  used: { has(id: string): boolean },
  names: McpToolNames,
): { checked: CheckedApproval[]; ids: string[] } {
  const checked: CheckedApproval[] = [];
  const ids: string[] = [];
  for (const answer of answers) {
    const requestId = String(answer.approval_request_id);
    const answered =
      ids.includes(requestId) ||
      used.has(requestId) ||
      history.some(
        (item) =>
          (item.type === 'mcp_approval_response' || item.type === 'mcp_call') &&
          (item as { approval_request_id?: unknown }).approval_request_id === requestId,
      );
    if (answered)
      throw new McpApprovalRefused(
        'mcp_approval_already_used',
        `The approval request '${requestId}' was answered already; an approval is used once.`,
      );
    ids.push(requestId);
    const asked = history.find(
      (item) => item.type === 'mcp_approval_request' && item.id === requestId && madeByGateway(item),
    ) as { server_label?: unknown; name?: unknown; arguments?: unknown } | undefined;
    if (!asked)
      throw new McpApprovalRefused(
        'mcp_approval_request_not_found',
        `No mcp_approval_request that this gateway made in the previous response chain has the id '${requestId}' (an approval answers a request found through previous_response_id).`,
      );
    const label = String(asked.server_label);
    const name = String(asked.name);
    const engineName = names.engineName(label, name);
    if (engineName === undefined)
      throw new McpApprovalRefused(
        'mcp_approval_tool_not_allowed',
        `The approval request '${requestId}' is for a tool that this request's mcp tools do not allow (its server_label or allowed_tools).`,
      );
    checked.push({
      requestId,
      label,
      name,
      args: String(asked.arguments ?? ''),
      engineName,
      approve: answer.approve === true,
      reason: answer.reason,
    });
  }
  return { checked, ids };
}

/**
 * Makes the calls the client approved (before the first engine turn) and notes the denied ones:
 * the chat messages of each go to `into.messages`, each call made and its result to `into.approved`.
 */
export async function answerApprovals(
  approvals: readonly CheckedApproval[],
  caller: McpToolCaller,
  signal: AbortSignal,
  into: { messages: ChatMessage[]; approved: Approved[] },
): Promise<void> {
  for (const { requestId, label, name, args, engineName, approve, reason } of approvals) {
    into.messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: requestId, type: 'function', function: { name: engineName, arguments: args } }],
    });
    if (!approve) {
      const why = typeof reason === 'string' && reason ? `: ${reason}` : '.';
      into.messages.push({
        role: 'tool',
        tool_call_id: requestId,
        content: `The user did not approve this tool call${why}`,
      });
      continue;
    }
    const item: McpCallItem = {
      id: newId('mcp'),
      type: 'mcp_call',
      status: 'in_progress',
      server_label: label,
      name,
      arguments: args,
      output: null,
      error: null,
      approval_request_id: requestId,
    };
    const connections = new Map<string, McpConnection>();
    let result: McpCallResult;
    try {
      result = await caller.call(item, connections, signal);
    } finally {
      for (const c of connections.values()) void c.close();
    }
    if (signal.aborted) throw new ClientDisconnected();
    into.approved.push({ item, result });
    into.messages.push({ role: 'tool', tool_call_id: requestId, content: mcpResultText(result) });
  }
}
