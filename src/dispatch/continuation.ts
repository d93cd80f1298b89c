import type { ApiName } from '../observability/metrics.js';
import type { Continuation } from './types.js';

/**
 * The body of a continuation request: the original request asking the engine to go on from
 * the text already generated. Chat: the partial text as a final assistant message with
 * `continue_final_message: true` and `add_generation_prompt: false` (vLLM, SGLang, and
 * sluice's llama.cpp worker honour both). Completions: the prompt followed by the partial text.
 * `max_tokens` shrinks by what was already generated. Undefined when it cannot be built (a
 * prompt of token ids, or an empty partial text).
 */
export function continuationBody(
  api: ApiName,
  original: Record<string, unknown>,
  continuation: Continuation,
): Record<string, unknown> | undefined {
  if (continuation.text.length === 0) return undefined;
  const body: Record<string, unknown> = { ...original };
  if (api === 'completions') {
    if (typeof original.prompt !== 'string') return undefined;
    body.prompt = original.prompt + continuation.text;
  } else {
    const messages = Array.isArray(original.messages) ? original.messages : [];
    const last = messages.at(-1) as { role?: unknown; content?: unknown } | undefined;
    // A request that already continued its final assistant message (a prefill) goes on from it.
    if (
      original.continue_final_message === true &&
      last?.role === 'assistant' &&
      typeof last.content === 'string'
    )
      body.messages = [...messages.slice(0, -1), { ...last, content: last.content + continuation.text }];
    else body.messages = [...messages, { role: 'assistant', content: continuation.text }];
    body.continue_final_message = true;
    body.add_generation_prompt = false;
  }
  for (const key of ['max_tokens', 'max_completion_tokens', 'max_output_tokens']) {
    const limit = original[key];
    if (typeof limit === 'number') body[key] = Math.max(1, limit - continuation.tokens);
  }
  return body;
}
