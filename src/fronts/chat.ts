import type { z } from 'zod';
import {
  type ChatCompletionRequest,
  type CompletionRequest,
  chatCompletionSchema,
  chatPromptText,
  completionPromptText,
  completionSchema,
} from '../chat/request-schema.js';
import type { GenerationFront, Translation } from '../pipeline/front.js';
import { validateBody } from '../pipeline/validate-body.js';
import { CHAT_STREAM } from './chat-stream.js';

type Schema = typeof chatCompletionSchema | typeof completionSchema;
type Body = ChatCompletionRequest | CompletionRequest;

/**
 * OpenAI's chat completions and completions: the client's request goes to the engine as it came
 * (every engine-specific parameter passes through, as the very text the client sent when the
 * gateway adds nothing to it), and its answer comes back as the engine sent it.
 */
function openAiFront<S extends Schema>(
  api: 'chat_completions' | 'completions',
  path: string,
  schema: S,
  promptText: (body: z.output<S>) => string,
): GenerationFront {
  return {
    api,
    path,
    translate(request, keyed): Translation {
      const raw = request.body as Record<string, unknown>;
      const body = validateBody(schema, request.body) as Body;
      const stream = body.stream === true;
      // A key's usage is counted from the engine's: a stream must carry it, shown or not.
      const hiddenUsage = keyed && stream && body.stream_options?.include_usage !== true;
      const fallbacks = body.fallbacks ?? undefined;
      // The gateway's own fields never reach an engine.
      const own = fallbacks !== undefined || 'fallbacks' in raw;
      const clientBody = own ? withoutFallbacks(raw) : raw;
      const upstream = hiddenUsage
        ? { ...clientBody, stream_options: { ...(body.stream_options ?? {}), include_usage: true } }
        : clientBody;
      const completionTokens = raw.max_completion_tokens;
      return {
        model: body.model,
        path,
        stream,
        body: upstream,
        payload:
          hiddenUsage || own || request.rawJson === undefined ? JSON.stringify(upstream) : request.rawJson,
        outputTokens:
          typeof completionTokens === 'number'
            ? [
                ['max_tokens', body.max_tokens],
                ['max_completion_tokens', completionTokens],
              ]
            : [['max_tokens', body.max_tokens]],
        promptText: () => promptText(body as z.output<S>),
        hiddenUsage,
        encoder: () => CHAT_STREAM,
        answer: (done) => ({ payload: done.body, contentType: done.contentType }),
        traced: raw,
        fallbacks,
      };
    },
  };
}

/** The client's body without the gateway's own `fallbacks`. */
function withoutFallbacks(raw: Record<string, unknown>): Record<string, unknown> {
  const { fallbacks: _fallbacks, ...rest } = raw;
  return rest;
}

export const CHAT_FRONT = openAiFront(
  'chat_completions',
  '/v1/chat/completions',
  chatCompletionSchema,
  chatPromptText,
);
export const COMPLETIONS_FRONT = openAiFront(
  'completions',
  '/v1/completions',
  completionSchema,
  completionPromptText,
);
