/** Token usage of a chat completion as the Responses API shows it. */
import type { Usage } from '../streams/chat-stream-tracker.js';
import type { ResponseUsage } from './types.js';

/** A chat-completions `usage` as the Responses API shows it (input, output tokens and their details). */
export function toResponseUsage(usage: Usage): ResponseUsage {
  const details = usage as {
    prompt_tokens_details?: { cached_tokens?: number } | null;
    completion_tokens_details?: { reasoning_tokens?: number } | null;
  };
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: details.prompt_tokens_details?.cached_tokens ?? 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: details.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: usage.total_tokens,
  };
}
