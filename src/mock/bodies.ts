import type { Api, Usage } from './sse.js';

/** Non-streaming bodies and error bodies, shaped like vLLM's OpenAI server. */

export interface ChoiceResult {
  text: string;
  reasoning: string;
  toolCall: { id: string; name: string; arguments: string } | undefined;
  finishReason: string;
}

export function completeBody(
  api: Api,
  id: string,
  model: string,
  created: number,
  choices: readonly ChoiceResult[],
  usage: Usage,
): string {
  if (api === 'chat') {
    return JSON.stringify({
      id,
      object: 'chat.completion',
      created,
      model,
      choices: choices.map((c, index) => ({
        index,
        message: {
          role: 'assistant',
          content: c.toolCall ? null : c.text,
          ...(c.reasoning ? { reasoning_content: c.reasoning } : {}),
          tool_calls: c.toolCall
            ? [
                {
                  id: c.toolCall.id,
                  type: 'function',
                  function: { name: c.toolCall.name, arguments: c.toolCall.arguments },
                },
              ]
            : [],
        },
        logprobs: null,
        finish_reason: c.finishReason,
        stop_reason: null,
      })),
      usage,
    });
  }
  return JSON.stringify({
    id,
    object: 'text_completion',
    created,
    model,
    choices: choices.map((c, index) => ({
      index,
      text: c.text,
      logprobs: null,
      finish_reason: c.finishReason,
      stop_reason: null,
    })),
    usage,
  });
}

/** vLLM's ErrorResponse body. */
export function engineError(message: string, type: string, code: number): string {
  return JSON.stringify({ object: 'error', message, type, param: null, code });
}

export function errorTypeOf(status: number): string {
  switch (status) {
    case 400:
      return 'BadRequestError';
    case 404:
      return 'NotFoundError';
    case 429:
      return 'RateLimitError';
    case 503:
      return 'ServiceUnavailableError';
    default:
      return 'InternalServerError';
  }
}
