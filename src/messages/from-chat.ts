import { newMessageId, newToolUseId } from './ids.js';
import { toStopReason } from './stop-reason.js';
import { toolInput } from './tool-input.js';
import { type MessageObject, type OutputBlock, THINKING_SIGNATURE } from './types.js';

interface ChatCompletion {
  choices?: {
    message?: {
      content?: unknown;
      reasoning_content?: unknown;
      reasoning?: unknown;
      tool_calls?: { function?: { name?: unknown; arguments?: unknown } }[] | null;
    };
    finish_reason?: unknown;
    stop_reason?: unknown;
  }[];
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } | null;
}

const count = (value: unknown): number => (typeof value === 'number' && Number.isFinite(value) ? value : 0);

/**
 * A non-streaming chat completion as an Anthropic `message`: thinking first, then the text, then
 * one `tool_use` block per tool call (its arguments parsed into `input`).
 */
export function toMessage(
  json: Record<string, unknown>,
  model: string,
  stopSequences: readonly string[] | undefined,
): MessageObject {
  const completion = json as ChatCompletion;
  const choice = completion.choices?.[0];
  const message = choice?.message;
  const content: OutputBlock[] = [];
  const reasoning = message?.reasoning_content ?? message?.reasoning;
  if (typeof reasoning === 'string' && reasoning.length > 0)
    content.push({ type: 'thinking', thinking: reasoning, signature: THINKING_SIGNATURE });
  if (typeof message?.content === 'string' && message.content.length > 0)
    content.push({ type: 'text', text: message.content });
  for (const call of message?.tool_calls ?? []) {
    const fn = call?.function;
    content.push({
      type: 'tool_use',
      id: newToolUseId(),
      name: typeof fn?.name === 'string' ? fn.name : '',
      input: toolInput(typeof fn?.arguments === 'string' ? fn.arguments : undefined),
    });
  }
  const finish = typeof choice?.finish_reason === 'string' ? choice.finish_reason : undefined;
  const stop = toStopReason(finish, choice?.stop_reason, stopSequences);
  return {
    id: newMessageId(),
    type: 'message',
    role: 'assistant',
    model,
    content,
    ...stop,
    usage: {
      input_tokens: count(completion.usage?.prompt_tokens),
      output_tokens: count(completion.usage?.completion_tokens),
    },
  };
}
