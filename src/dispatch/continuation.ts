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

/** Fields a request constrains its output with: OpenAI's, and the engines' own (vLLM, SGLang, llama.cpp). */
const CONSTRAINTS = [
  'guided_json',
  'guided_regex',
  'guided_choice',
  'guided_grammar',
  'structured_outputs',
  'json_schema',
  'regex',
  'ebnf',
  'grammar',
] as const;

/**
 * Why a stream of this request cannot be continued whatever was shown, or undefined. Output
 * constrained to a schema, a grammar or a pattern: an engine that enforces it starts a new
 * document after the prefill, so the stitched answer would be invalid and nothing would say so
 * (until a continuation can carry a constraint for the rest of the document only).
 */
export function unsafeToContinue(body: Record<string, unknown>): string | undefined {
  const format = body.response_format as { type?: unknown } | null | undefined;
  if (format?.type === 'json_object' || format?.type === 'json_schema')
    return `structured output (response_format ${format.type})`;
  for (const key of CONSTRAINTS) {
    if (body[key] !== undefined && body[key] !== null) return `constrained output (${key})`;
  }
  return undefined;
}
