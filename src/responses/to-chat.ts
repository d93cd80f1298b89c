import type { ChatMessage } from '../chat/types.js';
import { compactionMessage } from './compaction-item.js';
import { type InputFilePart, inputFileText } from './input-files.js';
import type { CreateResponseRequest } from './request-schema.js';
import type { InputItem, OutputItem } from './types.js';

export type { ChatMessage };

type ContextItem = InputItem | OutputItem;

function partsText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part: { type?: unknown; text?: unknown; refusal?: unknown }) =>
      typeof part.text === 'string' ? part.text : typeof part.refusal === 'string' ? part.refusal : '',
    )
    .join('');
}

/** Content with its `input_file` parts read as text parts (input-files.ts). */
function filesAsText(content: unknown): unknown {
  if (!Array.isArray(content) || !content.some((p: { type?: unknown }) => p.type === 'input_file'))
    return content;
  return content.map((part: { type?: unknown }) =>
    part.type === 'input_file' ? { type: 'input_text', text: inputFileText(part as InputFilePart) } : part,
  );
}

/**
 * User content keeps images as chat `image_url` parts; text-only content becomes a plain string.
 * Files become text (input-files.ts), set apart from the text around them by blank lines.
 */
function userContent(content: unknown): string | unknown[] {
  if (!Array.isArray(content)) return partsText(content);
  type Part = { type?: unknown; text?: unknown; image_url?: unknown; detail?: unknown };
  const hasFile = content.some((p: Part) => p.type === 'input_file');
  const parts = filesAsText(content) as Part[];
  const hasImage = parts.some((p) => p.type === 'input_image');
  if (!hasImage) return hasFile ? parts.map((part) => partsText([part])).join('\n\n') : partsText(parts);
  return parts.map((part) =>
    part.type === 'input_image'
      ? {
          type: 'image_url',
          image_url: { url: part.image_url, ...(part.detail ? { detail: part.detail } : {}) },
        }
      : { type: 'text', text: typeof part.text === 'string' ? part.text : '' },
  );
}

/**
 * Turns a conversation context (stored input and output items, oldest first) into chat
 * messages. Consecutive function calls become one assistant message with several tool calls;
 * reasoning items are not sent back to the engine.
 */
export function contextToMessages(
  instructions: string | null | undefined,
  items: readonly ContextItem[],
): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (instructions) messages.push({ role: 'system', content: instructions });
  for (const item of items) {
    const record = item as Record<string, unknown>;
    switch (item.type) {
      case 'message': {
        const role = record.role as string;
        if (role === 'assistant')
          messages.push({ role: 'assistant', content: partsText(filesAsText(record.content)) });
        else if (role === 'system' || role === 'developer')
          messages.push({ role: 'system', content: partsText(filesAsText(record.content)) });
        else messages.push({ role: 'user', content: userContent(record.content) });
        break;
      }
      case 'function_call': {
        const call = {
          id: String(record.call_id),
          type: 'function' as const,
          function: { name: String(record.name), arguments: String(record.arguments ?? '') },
        };
        const last = messages.at(-1);
        if (last?.role === 'assistant' && last.tool_calls) last.tool_calls.push(call);
        else if (last?.role === 'assistant' && !last.tool_calls && typeof last.content === 'string') {
          last.tool_calls = [call];
        } else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        break;
      }
      case 'mcp_call': {
        // An MCP call the gateway made: the engine sees it as a tool call and its result.
        const call = {
          id: String(record.id),
          type: 'function' as const,
          function: { name: String(record.name), arguments: String(record.arguments ?? '') },
        };
        const last = messages.at(-1);
        if (last?.role === 'assistant' && !last.tool_calls && typeof last.content === 'string')
          last.tool_calls = [call];
        else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        messages.push({ role: 'tool', tool_call_id: call.id, content: mcpResultText(record) });
        break;
      }
      case 'function_call_output':
        messages.push({
          role: 'tool',
          tool_call_id: String(record.call_id),
          content: typeof record.output === 'string' ? record.output : partsText(filesAsText(record.output)),
        });
        break;
      case 'compaction':
        // What came before it, summarised (POST /v1/responses/compact).
        messages.push({ role: 'user', content: compactionMessage(record.encrypted_content) });
        break;
      default:
        // reasoning and anything else carries nothing the engine should see again
        break;
    }
  }
  return messages;
}

/** What the engine is told an MCP call gave: its output, or that it failed and why. */
export function mcpResultText(record: Record<string, unknown>): string {
  if (typeof record.error === 'string' && record.error !== '')
    return `Error: the tool call failed: ${record.error}`;
  return typeof record.output === 'string' ? record.output : '';
}

/** The chat-completions body for a Responses request. Always streamed, with usage. */
export function toChatRequest(
  request: CreateResponseRequest,
  messages: ChatMessage[],
): Record<string, unknown> {
  const body: Record<string, unknown> = {
    model: request.model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (request.max_output_tokens != null) body.max_tokens = request.max_output_tokens;
  if (request.temperature != null) body.temperature = request.temperature;
  if (request.top_p != null) body.top_p = request.top_p;
  if (request.user != null) body.user = request.user;
  if (request.presence_penalty != null) body.presence_penalty = request.presence_penalty;
  if (request.frequency_penalty != null) body.frequency_penalty = request.frequency_penalty;
  if (request.top_logprobs) {
    body.logprobs = true;
    body.top_logprobs = request.top_logprobs;
  }
  if (request.parallel_tool_calls != null) body.parallel_tool_calls = request.parallel_tool_calls;
  if (request.reasoning?.effort) body.reasoning_effort = request.reasoning.effort;
  const functions = (request.tools ?? []).filter((tool) => tool.type === 'function');
  if (functions.length > 0) {
    body.tools = functions.map((tool) => ({
      type: 'function',
      function: {
        name: tool.name,
        ...(tool.description != null ? { description: tool.description } : {}),
        parameters: tool.parameters ?? { type: 'object', properties: {} },
        ...(tool.strict != null ? { strict: tool.strict } : {}),
      },
    }));
  }
  const choice = request.tool_choice;
  if (choice != null) {
    body.tool_choice =
      typeof choice === 'string' ? choice : { type: 'function', function: { name: choice.name } };
  }
  const format = request.text?.format;
  if (format?.type === 'json_schema') {
    body.response_format = {
      type: 'json_schema',
      json_schema: {
        name: format.name,
        schema: format.schema,
        ...(format.description != null ? { description: format.description } : {}),
        ...(format.strict != null ? { strict: format.strict } : {}),
      },
    };
  } else if (format?.type === 'json_object') {
    body.response_format = { type: 'json_object' };
  }
  return body;
}
