import type { ChatMessage, ChatRequestBody } from '../chat/types.js';
import type {
  AnthropicMessage,
  ContentBlock,
  CountTokensRequest,
  MessagesRequest,
} from './request-schema.js';

type ImageBlock = Extract<ContentBlock, { type: 'image' }>;
type ToolResultBlock = Extract<ContentBlock, { type: 'tool_result' }>;

/** An image block as a chat `image_url` part: base64 sources become data URLs. */
export function imagePart(block: ImageBlock): { type: 'image_url'; image_url: { url: string } } {
  const source = block.source;
  const url = source.type === 'base64' ? `data:${source.media_type};base64,${source.data}` : source.url;
  return { type: 'image_url', image_url: { url } };
}

export function systemText(system: MessagesRequest['system']): string | undefined {
  if (system === undefined) return undefined;
  const text = typeof system === 'string' ? system : system.map((b) => b.text).join('\n');
  return text.length > 0 ? text : undefined;
}

/** A tool result's content as the text of a `tool` message (images in results cannot be carried). */
function toolResultText(block: ToolResultBlock): string {
  const content = block.content;
  let text =
    content === undefined
      ? ''
      : typeof content === 'string'
        ? content
        : content.map((part) => (part.type === 'text' ? part.text : '[image]')).join('\n');
  if (block.is_error) text = `[error] ${text}`;
  return text;
}

/** The user's text and images: a plain string when there is no image. */
function userContent(blocks: readonly ContentBlock[]): string | unknown[] | undefined {
  const parts = blocks.filter((b) => b.type === 'text' || b.type === 'image');
  if (parts.length === 0) return undefined;
  if (!parts.some((b) => b.type === 'image'))
    return parts.map((b) => (b.type === 'text' ? b.text : '')).join('\n');
  return parts.map((b) =>
    b.type === 'image' ? imagePart(b) : { type: 'text', text: b.type === 'text' ? b.text : '' },
  );
}

/**
 * One Anthropic message as chat messages. A user turn's `tool_result` blocks become `tool`
 * messages (first, since they answer the assistant's calls just before), then its text and
 * images one user message. An assistant turn's text is its content and its `tool_use` blocks
 * its `tool_calls`; thinking blocks are not sent back to the engine.
 */
function toChatMessages(message: AnthropicMessage): ChatMessage[] {
  if (typeof message.content === 'string') return [{ role: message.role, content: message.content }];
  const blocks = message.content;
  if (message.role === 'user') {
    const out: ChatMessage[] = [];
    for (const block of blocks) {
      if (block.type === 'tool_result')
        out.push({ role: 'tool', tool_call_id: block.tool_use_id, content: toolResultText(block) });
    }
    const content = userContent(blocks);
    if (content !== undefined) out.push({ role: 'user', content });
    return out;
  }
  const text = blocks
    .map((b) => (b.type === 'text' ? b.text : ''))
    .filter((t) => t.length > 0)
    .join('\n');
  const calls = blocks
    .filter((b): b is Extract<ContentBlock, { type: 'tool_use' }> => b.type === 'tool_use')
    .map((b) => ({
      id: b.id,
      type: 'function' as const,
      function: { name: b.name, arguments: JSON.stringify(b.input) },
    }));
  const assistant: ChatMessage = {
    role: 'assistant',
    content: text.length > 0 ? text : calls.length > 0 ? null : '',
  };
  if (calls.length > 0) assistant.tool_calls = calls;
  return [assistant];
}

function hasToolUse(message: AnthropicMessage): boolean {
  return typeof message.content !== 'string' && message.content.some((b) => b.type === 'tool_use');
}

export function toChatMessagesAll(request: CountTokensRequest | MessagesRequest): ChatMessage[] {
  const messages: ChatMessage[] = [];
  const system = systemText(request.system);
  if (system !== undefined) messages.push({ role: 'system', content: system });
  for (const message of request.messages) messages.push(...toChatMessages(message));
  return messages;
}

export function toChatTools(request: CountTokensRequest | MessagesRequest): unknown[] | undefined {
  if (!request.tools || request.tools.length === 0) return undefined;
  return request.tools.map((tool) => ({
    type: 'function',
    function: {
      name: tool.name,
      ...(tool.description !== undefined ? { description: tool.description } : {}),
      parameters: tool.input_schema,
    },
  }));
}

/**
 * The chat-completions body for a Messages request (see the mapping table in README.md). A
 * stream always asks for usage: the final `message_delta` carries it, and the usage-only chunk
 * never reaches the client (the stream is rebuilt event by event, not relayed).
 */
export function toChatRequest(request: MessagesRequest): ChatRequestBody {
  const body: ChatRequestBody = {
    model: request.model,
    messages: toChatMessagesAll(request),
    max_tokens: request.max_tokens,
  };
  if (request.stream === true) {
    body.stream = true;
    body.stream_options = { include_usage: true };
  }
  if (request.stop_sequences && request.stop_sequences.length > 0) body.stop = request.stop_sequences;
  if (request.temperature !== undefined) body.temperature = request.temperature;
  if (request.top_p !== undefined) body.top_p = request.top_p;
  if (request.top_k !== undefined) body.top_k = request.top_k;
  const user = request.metadata?.user_id;
  if (typeof user === 'string') body.user = user;
  const tools = toChatTools(request);
  const choice = request.tool_choice;
  if (tools) {
    body.tools = tools;
    if (choice) {
      body.tool_choice =
        choice.type === 'any'
          ? 'required'
          : choice.type === 'tool'
            ? { type: 'function', function: { name: choice.name } }
            : choice.type;
      if ('disable_parallel_tool_use' in choice && choice.disable_parallel_tool_use === true)
        body.parallel_tool_calls = false;
    }
  }
  // A final assistant turn is a prefill: the engine continues it instead of starting a new turn.
  const last = request.messages.at(-1);
  if (last?.role === 'assistant' && !hasToolUse(last)) {
    body.continue_final_message = true;
    body.add_generation_prompt = false;
  }
  // vLLM and SGLang switch a model's reasoning on and off through its chat template.
  const thinking = request.thinking?.type;
  if (thinking === 'enabled' || thinking === 'adaptive')
    body.chat_template_kwargs = { enable_thinking: true };
  else if (thinking === 'disabled') body.chat_template_kwargs = { enable_thinking: false };
  return body;
}
