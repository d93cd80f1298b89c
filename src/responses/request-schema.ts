import { z } from 'zod';

/**
 * The body of `POST /v1/responses`. Fields sluice translates are checked; other documented
 * fields (`include`, `truncation`, `service_tier`, ...) are accepted and have no effect.
 */
const opt = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

const textPart = z.looseObject({ type: z.enum(['input_text', 'output_text']), text: z.string() });
const imagePart = z.looseObject({
  type: z.literal('input_image'),
  image_url: opt(z.string()),
  file_id: opt(z.string()),
  detail: opt(z.string()),
});
const refusalPart = z.looseObject({ type: z.literal('refusal'), refusal: z.string() });
/** A file: inline `file_data` (a data URL) with its `filename`; see input-files.ts for what is accepted. */
const filePart = z.looseObject({
  type: z.literal('input_file'),
  file_data: opt(z.string()),
  file_id: opt(z.string()),
  file_url: opt(z.string()),
  filename: opt(z.string()),
});
const contentPart = z.discriminatedUnion('type', [textPart, imagePart, refusalPart, filePart]);

export const messageItemSchema = z.looseObject({
  type: z.literal('message'),
  id: opt(z.string()),
  role: z.enum(['user', 'assistant', 'system', 'developer']),
  content: z.union([z.string(), z.array(contentPart)]),
  status: opt(z.string()),
});

export const functionCallItemSchema = z.looseObject({
  type: z.literal('function_call'),
  id: opt(z.string()),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: z.string(),
  status: opt(z.string()),
});

export const functionCallOutputItemSchema = z.looseObject({
  type: z.literal('function_call_output'),
  id: opt(z.string()),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]),
  status: opt(z.string()),
});

export const reasoningItemSchema = z.looseObject({
  type: z.literal('reasoning'),
  id: opt(z.string()),
  summary: opt(z.array(z.unknown())),
  content: opt(z.array(z.unknown())),
});

/** A compaction item from `POST /v1/responses/compact` (see compaction.ts). */
export const compactionItemSchema = z.looseObject({
  type: z.literal('compaction'),
  id: opt(z.string()),
  encrypted_content: z.string().min(1),
});

/** The MCP items a client may send back (stateless use), and its answer to an approval request. */
export const mcpApprovalResponseItemSchema = z.looseObject({
  type: z.literal('mcp_approval_response'),
  id: opt(z.string()),
  approval_request_id: z.string().min(1),
  approve: z.boolean(),
  reason: opt(z.string()),
});
const mcpApprovalRequestItemSchema = z.looseObject({
  type: z.literal('mcp_approval_request'),
  id: z.string().min(1),
  server_label: z.string(),
  name: z.string(),
  arguments: z.string(),
});
const mcpCallItemSchema = z.looseObject({
  type: z.literal('mcp_call'),
  id: z.string().min(1),
  server_label: z.string(),
  name: z.string(),
  arguments: z.string(),
  output: opt(z.string()),
  error: opt(z.string()),
});
const mcpListToolsItemSchema = z.looseObject({
  type: z.literal('mcp_list_tools'),
  id: opt(z.string()),
  server_label: z.string(),
  tools: z.array(z.unknown()),
});

/** An input item; a bare `{role, content}` is a message (OpenAI's "easy input message"). */
export const inputItemSchema = z.preprocess(
  (value) =>
    typeof value === 'object' && value !== null && !('type' in value) && 'role' in value
      ? { type: 'message', ...value }
      : value,
  z.discriminatedUnion('type', [
    messageItemSchema,
    functionCallItemSchema,
    functionCallOutputItemSchema,
    reasoningItemSchema,
    compactionItemSchema,
    mcpApprovalResponseItemSchema,
    mcpApprovalRequestItemSchema,
    mcpCallItemSchema,
    mcpListToolsItemSchema,
  ]),
);
export type InputItemRequest = z.output<typeof inputItemSchema>;

const functionTool = z.looseObject({
  type: z.literal('function'),
  name: z.string().min(1).max(64),
  description: opt(z.string()),
  parameters: opt(z.record(z.string(), z.unknown())),
  strict: opt(z.boolean()),
});

const toolNames = z.array(z.string().min(1));
const toolFilter = z.looseObject({ tool_names: opt(toolNames), read_only: opt(z.boolean()) });

/** A remote MCP server whose tools the gateway offers to the engine and calls itself (README "MCP tools"). */
export const mcpToolSchema = z.looseObject({
  type: z.literal('mcp'),
  server_label: z
    .string()
    .min(1)
    .max(64)
    .regex(/^[A-Za-z0-9_-]+$/, 'letters, digits, _ and - only'),
  server_url: z.string().min(1).max(2048),
  server_description: opt(z.string()),
  /** Sent to this server only; never stored, echoed or logged. */
  headers: opt(z.record(z.string().min(1), z.string())),
  /** An OAuth access token, sent as `Authorization: Bearer`; never stored either. */
  authorization: opt(z.string()),
  allowed_tools: opt(z.union([toolNames, toolFilter])),
  require_approval: opt(
    z.union([
      z.enum(['always', 'never']),
      z.looseObject({ always: opt(toolFilter), never: opt(toolFilter) }),
    ]),
  ),
});
export type McpToolRequest = z.output<typeof mcpToolSchema>;

const toolChoice = z.union([
  z.enum(['auto', 'none', 'required']),
  z.looseObject({ type: z.literal('function'), name: z.string().min(1) }),
]);

const textFormat = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    name: z.string().min(1).max(64),
    schema: z.record(z.string(), z.unknown()),
    description: opt(z.string()),
    strict: opt(z.boolean()),
  }),
]);

export const createResponseSchema = z.looseObject({
  model: z.string().min(1),
  /** The gateway's own: models to answer when `model` cannot (README "Fallbacks"); never sent to an engine. */
  fallbacks: opt(z.array(z.string().min(1)).max(8)),
  // An empty list gives the engine nothing to answer.
  input: z.union([z.string(), z.array(inputItemSchema).min(1, 'at least one input item is needed')]),
  instructions: opt(z.string()),
  temperature: opt(z.number().min(0).max(2)),
  top_p: opt(z.number().min(0).max(1)),
  max_output_tokens: opt(z.number().int().positive()),
  tools: opt(z.array(z.discriminatedUnion('type', [functionTool, mcpToolSchema]))),
  tool_choice: opt(toolChoice),
  parallel_tool_calls: opt(z.boolean()),
  text: opt(z.looseObject({ format: opt(textFormat) })),
  metadata: opt(
    z
      .record(z.string().max(64), z.string().max(512))
      .refine((m) => Object.keys(m).length <= 16, 'at most 16 metadata keys'),
  ),
  user: opt(z.string()),
  store: opt(z.boolean()),
  previous_response_id: opt(z.string().min(1)),
  conversation: opt(z.union([z.string().min(1), z.looseObject({ id: z.string().min(1) })])),
  background: opt(z.boolean()),
  stream: opt(z.boolean()),
  reasoning: opt(z.looseObject({ effort: opt(z.string()), summary: opt(z.string()) })),
  truncation: opt(z.enum(['auto', 'disabled'])),
  presence_penalty: opt(z.number().min(-2).max(2)),
  frequency_penalty: opt(z.number().min(-2).max(2)),
  top_logprobs: opt(z.number().int().min(0).max(20)),
  max_tool_calls: opt(z.number().int().positive()),
  service_tier: opt(z.string()),
  safety_identifier: opt(z.string().max(64)),
  prompt_cache_key: opt(z.string()),
});
export type CreateResponseRequest = z.output<typeof createResponseSchema>;
