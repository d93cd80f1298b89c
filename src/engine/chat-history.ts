import type { ChatHistoryItem } from 'node-llama-cpp';
import { type ChatMessage, RequestError } from './request-schema.js';

export interface ChatFormatOptions {
  /** Open a new assistant turn after the messages (vLLM's default: true). */
  addGenerationPrompt?: boolean | null | undefined;
  /** Leave the final assistant message open so generation continues it. */
  continueFinalMessage?: boolean | null | undefined;
}

/** The message's text; the model reads text only, so an image (or any other part) is refused. */
function textOf(message: ChatMessage): string {
  const content = message.content;
  if (typeof content === 'string') return content;
  return (content ?? [])
    .map((part) => {
      if (part.type === 'text' && typeof part.text === 'string') return part.text;
      if (part.type === 'image_url' || part.type === 'input_image')
        throw new RequestError('This model takes no images: it reads text only.', 400, {
          param: 'messages',
          code: 'image_input_not_supported',
        });
      throw new RequestError(`Content parts of type '${part.type}' are not supported: text only.`, 400, {
        param: 'messages',
        code: 'unsupported_content_part',
      });
    })
    .join('');
}

/**
 * OpenAI messages as node-llama-cpp chat history. Its chat wrappers render the last model item
 * without the end-of-turn marker, so the history ends with an empty model item to open a new
 * assistant turn, or with the final assistant message itself to continue it (the template output
 * with the closing of that message trimmed, which is what vLLM's `continue_final_message` does).
 * One difference from vLLM: with neither option, a final assistant message also stays open.
 */
export function toChatHistory(
  messages: readonly ChatMessage[],
  options: ChatFormatOptions,
): ChatHistoryItem[] {
  const continueFinal = options.continueFinalMessage === true;
  const addPrompt = options.addGenerationPrompt ?? !continueFinal;
  if (continueFinal && addPrompt)
    throw new RequestError(
      'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
      400,
    );
  if (continueFinal && messages.at(-1)?.role !== 'assistant')
    throw new RequestError('`continue_final_message` needs the last message to be from the assistant.', 400);

  const history = messages.map(historyItem);
  if (addPrompt) history.push({ type: 'model', response: [] });
  return history;
}

/**
 * node-llama-cpp's history has no tool items that a template renders as such: an assistant's
 * tool calls become JSON text of its turn (the shape a forced call is generated in), and a tool
 * result a user turn.
 */
function historyItem(message: ChatMessage): ChatHistoryItem {
  const text = textOf(message);
  if (message.role === 'system' || message.role === 'developer') return { type: 'system', text };
  if (message.role === 'user') return { type: 'user', text };
  if (message.role === 'tool') return { type: 'user', text };
  const calls = (message.tool_calls ?? []).map((call) =>
    JSON.stringify({ name: call.function.name, arguments: parseArguments(call.function.arguments) }),
  );
  return { type: 'model', response: [[text, ...calls].filter((t) => t.length > 0).join('\n')] };
}

function parseArguments(text: string | null | undefined): unknown {
  try {
    return JSON.parse(text ?? '{}');
  } catch {
    return text;
  }
}
