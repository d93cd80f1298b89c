import { z } from 'zod';

/**
 * Request schemas for chat completions and completions. They check what the gateway relies on
 * and what is plainly wrong; objects stay loose because engines accept many extra parameters
 * (vLLM's `top_k`, `chat_template_kwargs`, ...) that must pass through untouched.
 */
const optionalNullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

const samplingShape = {
  model: z.string().min(1),
  stream: optionalNullable(z.boolean()),
  stream_options: optionalNullable(z.looseObject({ include_usage: optionalNullable(z.boolean()) })),
  max_tokens: optionalNullable(z.number().int().positive()),
  temperature: optionalNullable(z.number().min(0).max(2)),
  top_p: optionalNullable(z.number().min(0).max(1)),
  n: optionalNullable(z.number().int().min(1).max(128)),
  stop: optionalNullable(z.union([z.string(), z.array(z.string()).max(16)])),
  presence_penalty: optionalNullable(z.number().min(-2).max(2)),
  frequency_penalty: optionalNullable(z.number().min(-2).max(2)),
  seed: optionalNullable(z.number().int()),
  user: optionalNullable(z.string()),
  /** The gateway's own: models to answer when `model` cannot (README "Fallbacks"); never sent to an engine. */
  fallbacks: optionalNullable(z.array(z.string().min(1)).max(8)),
};

const contentPartSchema = z.looseObject({ type: z.string().min(1) });

const messageSchema = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: optionalNullable(z.union([z.string(), z.array(contentPartSchema)])),
  name: optionalNullable(z.string()),
  tool_calls: optionalNullable(z.array(z.looseObject({}))),
  tool_call_id: optionalNullable(z.string()),
});

const toolSchema = z.looseObject({
  type: z.string().min(1),
  function: z.looseObject({ name: z.string().min(1) }).optional(),
});

export const chatCompletionSchema = z.looseObject({
  ...samplingShape,
  messages: z.array(messageSchema).min(1),
  max_completion_tokens: optionalNullable(z.number().int().positive()),
  tools: optionalNullable(z.array(toolSchema)),
});
export type ChatCompletionRequest = z.output<typeof chatCompletionSchema>;

const tokenIds = z.array(z.number().int().nonnegative());

export const completionSchema = z.looseObject({
  ...samplingShape,
  prompt: z.union([z.string(), z.array(z.string()).min(1), tokenIds.min(1), z.array(tokenIds).min(1)]),
  echo: optionalNullable(z.boolean()),
  suffix: optionalNullable(z.string()),
});
export type CompletionRequest = z.output<typeof completionSchema>;

/** A chat request's messages, as far as routing reads them (chat's, and what Messages and Responses become). */
export interface PromptMessages {
  readonly messages: readonly { readonly role: string; readonly content?: unknown }[];
}

/**
 * The prompt as plain text, for prefix-aware routing: one text for every front, so that a
 * conversation routes alike whichever API it came through.
 */
export function chatPromptText(request: PromptMessages): string {
  let text = '';
  for (const message of request.messages) {
    const content = message.content;
    if (typeof content === 'string') text += `${message.role}:${content}\n`;
    else if (Array.isArray(content)) {
      for (const part of content as { text?: unknown }[]) {
        if (typeof part?.text === 'string') text += `${message.role}:${part.text}\n`;
      }
    }
  }
  return text;
}

export function completionPromptText(request: CompletionRequest): string {
  const prompt = request.prompt;
  if (typeof prompt === 'string') return prompt;
  if (prompt.length > 0 && typeof prompt[0] === 'string') return (prompt as string[]).join('\n');
  return JSON.stringify(prompt);
}
