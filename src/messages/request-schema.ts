import { z } from 'zod';

/**
 * The body of `POST /v1/messages` (Anthropic's Messages API) and of `/v1/messages/count_tokens`.
 * The top level is strict, as Anthropic's is: an unknown field is a 400. Blocks keep their
 * known fields; `cache_control` and `citations` are accepted and have no effect. Only client
 * tools (`custom`) can be served: server tools (web search, code execution...) are refused.
 */
const cacheControl = z.looseObject({ type: z.string() }).nullable().optional();

const textBlock = z.object({
  type: z.literal('text'),
  text: z.string(),
  cache_control: cacheControl,
  citations: z.array(z.unknown()).nullable().optional(),
});

const imageSource = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('base64'),
    media_type: z.enum(['image/jpeg', 'image/png', 'image/gif', 'image/webp']),
    data: z.string().min(1),
  }),
  z.object({ type: z.literal('url'), url: z.string().url() }),
]);

const imageBlock = z.object({ type: z.literal('image'), source: imageSource, cache_control: cacheControl });

const toolUseBlock = z.object({
  type: z.literal('tool_use'),
  id: z.string().min(1),
  name: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
  cache_control: cacheControl,
});

const toolResultBlock = z.object({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1),
  content: z.union([z.string(), z.array(z.discriminatedUnion('type', [textBlock, imageBlock]))]).optional(),
  is_error: z.boolean().optional(),
  cache_control: cacheControl,
});

const thinkingBlock = z.object({
  type: z.literal('thinking'),
  thinking: z.string(),
  signature: z.string().optional(),
});

const redactedThinkingBlock = z.object({ type: z.literal('redacted_thinking'), data: z.string() });

export const contentBlockSchema = z.discriminatedUnion('type', [
  textBlock,
  imageBlock,
  toolUseBlock,
  toolResultBlock,
  thinkingBlock,
  redactedThinkingBlock,
]);

const messageSchema = z.object({
  role: z.enum(['user', 'assistant']),
  content: z.union([z.string(), z.array(contentBlockSchema)]),
});

const toolSchema = z.object({
  type: z.literal('custom').optional(),
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,128}$/, 'a tool name is 1-128 letters, digits, _ or -'),
  description: z.string().optional(),
  input_schema: z.looseObject({ type: z.literal('object') }),
  cache_control: cacheControl,
});

const toolChoiceSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }),
  z.object({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }),
  z.object({
    type: z.literal('tool'),
    name: z.string().min(1),
    disable_parallel_tool_use: z.boolean().optional(),
  }),
  z.object({ type: z.literal('none') }),
]);

const thinkingSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('enabled'),
    budget_tokens: z.number().int().min(1),
    display: z.string().nullable().optional(),
  }),
  z.object({ type: z.literal('adaptive'), display: z.string().nullable().optional() }),
  z.object({ type: z.literal('disabled') }),
]);

const systemSchema = z.union([z.string(), z.array(textBlock)]);

const common = {
  model: z.string().min(1),
  messages: z.array(messageSchema),
  system: systemSchema.optional(),
  tools: z.array(toolSchema).optional(),
  tool_choice: toolChoiceSchema.optional(),
  thinking: thinkingSchema.optional(),
};

export const messagesRequestSchema = z.strictObject({
  ...common,
  max_tokens: z.number().int().min(1),
  stream: z.boolean().optional(),
  stop_sequences: z.array(z.string()).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  metadata: z.strictObject({ user_id: z.string().nullable().optional() }).optional(),
  /** Accepted and ignored: one tier, one speed, one place, and the engine caches prefixes itself. */
  service_tier: z.enum(['auto', 'standard_only']).optional(),
  speed: z.enum(['standard', 'fast']).nullable().optional(),
  inference_geo: z.string().nullable().optional(),
  cache_control: cacheControl,
  /** The gateway's own: models to answer when `model` cannot (README "Fallbacks"). */
  fallbacks: z.array(z.string().min(1)).max(8).optional(),
});

export const countTokensRequestSchema = z.strictObject(common);

export type MessagesRequest = z.output<typeof messagesRequestSchema>;
export type CountTokensRequest = z.output<typeof countTokensRequestSchema>;
export type ContentBlock = z.output<typeof contentBlockSchema>;
export type AnthropicMessage = z.output<typeof messageSchema>;
