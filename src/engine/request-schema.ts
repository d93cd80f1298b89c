import { z } from 'zod';

/**
 * The request bodies the worker accepts, shaped like vLLM's. Objects stay loose: clients send
 * parameters this engine ignores (`user`, `top_k`, ...), and vLLM accepts them too.
 */
const optional = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

const samplingShape = {
  model: z.string(),
  stream: optional(z.boolean()),
  stream_options: optional(z.looseObject({ include_usage: optional(z.boolean()) })),
  max_tokens: optional(z.number().int().positive()),
  temperature: optional(z.number().min(0).max(2)),
  top_p: optional(z.number().gt(0).max(1)),
  seed: optional(z.number().int()),
  n: optional(z.literal(1, { error: 'only n=1 is supported' })),
  stop: optional(z.union([z.string(), z.array(z.string())])),
  /** vLLM's: the end-of-sequence token does not end generation (it is generated, and not shown). */
  ignore_eos: optional(z.boolean()),
};

/** Text parts are read; any other part (`image_url`, `input_audio`, ...) is refused in chat-history.ts. */
const contentPart = z.looseObject({ type: z.string(), text: z.string().optional() });

const toolCallSchema = z.looseObject({
  id: optional(z.string()),
  type: optional(z.string()),
  function: z.looseObject({ name: z.string(), arguments: optional(z.string()) }),
});

const messageSchema = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  content: optional(z.union([z.string(), z.array(contentPart)])),
  tool_calls: optional(z.array(toolCallSchema)),
  tool_call_id: optional(z.string()),
});
export type ChatMessage = z.output<typeof messageSchema>;

const toolSchema = z.looseObject({
  type: z.literal('function', { error: "only tools of type 'function' are supported" }),
  function: z.looseObject({
    name: z.string().min(1),
    description: optional(z.string()),
    parameters: optional(z.record(z.string(), z.unknown())),
  }),
});
export type Tool = z.output<typeof toolSchema>;

const toolChoiceSchema = z.union([
  z.enum(['none', 'auto', 'required']),
  z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string() }) }),
]);
export type ToolChoice = z.output<typeof toolChoiceSchema>;

export const chatRequestSchema = z.looseObject({
  ...samplingShape,
  messages: z.array(messageSchema).min(1),
  max_completion_tokens: optional(z.number().int().positive()),
  add_generation_prompt: optional(z.boolean()),
  continue_final_message: optional(z.boolean()),
  tools: optional(z.array(toolSchema)),
  tool_choice: optional(toolChoiceSchema),
});
export type ChatRequest = z.output<typeof chatRequestSchema>;

export const completionRequestSchema = z.looseObject({
  ...samplingShape,
  prompt: z.union([
    z.string(),
    z.tuple([z.string()], { error: 'only one prompt per request is supported' }).transform(([p]) => p),
    z.array(z.number().int().nonnegative()).min(1),
  ]),
});
export type CompletionRequest = z.output<typeof completionRequestSchema>;

export class RequestError extends Error {
  constructor(
    message: string,
    readonly status: 400 | 404,
    /** The request field at fault, and a string code for the error (else the status). */
    readonly detail: { param?: string; code?: string } = {},
  ) {
    super(message);
  }
}

export function parseRequest<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new RequestError('The request body must be a JSON object.', 400);
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const where = issue.path.length > 0 ? issue.path.map(String).join('.') : 'body';
  throw new RequestError(`Invalid value for '${where}': ${issue.message}`, 400, {
    param: issue.path.length > 0 ? String(issue.path[0]) : undefined,
  });
}
