/**
 * The Open Responses specification's schemas, re-expressed in zod for sluice's conformance test
 * (test/open-responses-conformance.test.ts). Source: the specification at openresponses.org,
 * version 2026-04-24, its `openapi.json` components:
 *
 * - "The response object" (`ResponseResource`) and the items of its `output` (`ItemField`:
 *   `Message`, `OutputTextContent`, `FunctionCall`, `Reasoning`, `Compaction`), `Usage`, `Error`,
 *   `IncompleteDetails`, `TextField`, `Reasoning`;
 * - the streaming events of `POST /responses` (`Response*StreamingEvent`, `ErrorStreamingEvent`);
 * - "The compacted response object" (`CompactResource`) of `POST /responses/compact`;
 * - the WebSocket mode's error message (`x-openresponses-websocket`).
 *
 * Nothing here is copied from the specification's files: each schema states, in zod, the
 * required fields and their types and enums. The specification's objects do not declare
 * `additionalProperties: false`, so none of these is `.strict()`: extra fields are allowed, as
 * the specification allows them. Fields the specification marks required are required here
 * (present, possibly `null` where it says `anyOf [..., null]`).
 *
 * Sluice's known, deliberate differences are the named allowances in `ALLOWANCES` below, each
 * used in exactly one place; nothing else is loosened.
 */
import { z } from 'zod';

/** Deliberate differences from the specification (README, "Conformance with Open Responses"). */
export const ALLOWANCES = {
  /**
   * Reasoning deltas are `response.reasoning_text.delta` / `.done` (OpenAI's names, which its SDK's
   * stream accumulator requires); the specification names them `response.reasoning.delta` / `.done`.
   * Both names are accepted, with the same fields.
   */
  reasoningTextEventNames: true,
  /**
   * A `json_schema` text format is echoed with its `schema` object; the specification's
   * response-side `JsonSchemaResponseFormat` declares `schema` as `null` (its request side takes
   * an object). The response schema accepts an object there.
   */
  jsonSchemaEchoesSchemaObject: true,
  /**
   * A compaction item's `encrypted_content` is base64 of the summary, not encrypted. The schema
   * only requires a string (as the specification does); the test does not claim it is opaque.
   */
  compactionContentNotEncrypted: true,
} as const;

const int = z.number().int();
const nullable = <T extends z.ZodType>(schema: T) => z.union([schema, z.null()]);

// --- Content and items (ItemField) ---------------------------------------------------------

/** `LogProb` (token, logprob, bytes, top_logprobs). */
const TopLogProb = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(int) });
export const LogProb = TopLogProb.extend({ top_logprobs: z.array(TopLogProb) });

/** `Annotation`: a discriminated union on `type`; sluice emits none, any typed object is checked by type. */
const Annotation = z.object({ type: z.string() });

/** `OutputTextContent`: type, text, annotations and logprobs are all required. */
export const OutputTextContent = z.object({
  type: z.literal('output_text'),
  text: z.string(),
  annotations: z.array(Annotation),
  logprobs: z.array(LogProb),
});

const RefusalContent = z.object({ type: z.literal('refusal'), refusal: z.string() });
const InputTextContent = z.object({ type: z.literal('input_text'), text: z.string() });

/** `MessageStatus`, `MessageRole`, `MessagePhase`. */
const ItemStatus = z.enum(['in_progress', 'completed', 'incomplete']);
const MessageRole = z.enum([
  'unknown',
  'user',
  'assistant',
  'system',
  'critic',
  'discriminator',
  'developer',
  'tool',
]);
export const MessagePhase = z.enum(['commentary', 'final_answer']);

/** `Message`: type, id, status, role, content required; `phase` optional (assistant output labels). */
export const Message = z.object({
  type: z.literal('message'),
  id: z.string(),
  status: ItemStatus,
  role: MessageRole,
  phase: nullable(MessagePhase).optional(),
  content: z.array(z.discriminatedUnion('type', [OutputTextContent, RefusalContent, InputTextContent])),
});

/** `FunctionCall`: type, id, call_id, name, arguments, status required. */
export const FunctionCall = z.object({
  type: z.literal('function_call'),
  id: z.string(),
  call_id: z.string(),
  name: z.string(),
  arguments: z.string(),
  status: ItemStatus,
});

const SummaryText = z.object({ type: z.literal('summary_text'), text: z.string() });
const ReasoningText = z.object({ type: z.literal('reasoning_text'), text: z.string() });

/** `Reasoning` item: type, id, summary required; content and encrypted_content optional. */
export const ReasoningItem = z.object({
  type: z.literal('reasoning'),
  id: z.string(),
  summary: z.array(SummaryText),
  content: z.array(ReasoningText).optional(),
  encrypted_content: nullable(z.string()).optional(),
  status: ItemStatus.optional(),
});

/** `Compaction` item: type, id, encrypted_content required (see ALLOWANCES.compactionContentNotEncrypted). */
export const CompactionItem = z.object({
  type: z.literal('compaction'),
  id: z.string(),
  encrypted_content: z.string(),
});

/** The output items sluice produces on these routes. An unknown item type is a failure. */
export const OutputItem = z.discriminatedUnion('type', [
  Message,
  FunctionCall,
  ReasoningItem,
  CompactionItem,
]);

// --- The response object (ResponseResource) ------------------------------------------------

/** `Usage`: the five fields and both detail objects are required. */
export const Usage = z.object({
  input_tokens: int,
  output_tokens: int,
  total_tokens: int,
  input_tokens_details: z.object({ cached_tokens: int }),
  output_tokens_details: z.object({ reasoning_tokens: int }),
});

/** `Error`: code and message. */
export const ErrorObject = z.object({ code: z.string(), message: z.string() });

/** `IncompleteDetails`: reason. */
const IncompleteDetails = z.object({ reason: z.string() });

/** `FunctionTool` (the only tool type sluice runs on these routes besides MCP): type, name, parameters, strict. */
const Tool = z.object({ type: z.string() });
const FunctionTool = z.object({
  type: z.literal('function'),
  name: z.string(),
  description: nullable(z.string()).optional(),
  parameters: nullable(z.record(z.string(), z.unknown())),
  strict: nullable(z.boolean()),
});

/** `ToolChoiceValueEnum`, a `FunctionToolChoice`, or `AllowedToolChoice`. */
const ToolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.object({ type: z.literal('function'), name: z.string() }),
  z.object({
    type: z.literal('allowed_tools'),
    tools: z.array(z.object({ type: z.string() })),
    mode: z.string(),
  }),
  z.object({ type: z.string() }),
]);

/** `TextField.format`: text, json_object, or json_schema (see ALLOWANCES.jsonSchemaEchoesSchemaObject). */
const TextFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    name: z.string(),
    description: nullable(z.string()).optional(),
    schema: ALLOWANCES.jsonSchemaEchoesSchemaObject ? nullable(z.record(z.string(), z.unknown())) : z.null(),
    strict: z.boolean(),
  }),
]);
const TextField = z.object({
  format: TextFormat,
  verbosity: nullable(z.enum(['low', 'medium', 'high'])).optional(),
});

/** `Reasoning` (the configuration): effort and summary, each nullable. */
const ReasoningConfig = z.object({
  effort: nullable(z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh'])).optional(),
  summary: nullable(z.enum(['auto', 'concise', 'detailed'])).optional(),
});

export const ResponseStatus = z.enum([
  'queued',
  'in_progress',
  'completed',
  'failed',
  'incomplete',
  'cancelled',
]);

/** `ResponseResource`: every field in the specification's `required` list. */
export const ResponseResource = z.object({
  id: z.string(),
  object: z.literal('response'),
  created_at: int,
  completed_at: nullable(int),
  status: ResponseStatus,
  incomplete_details: nullable(IncompleteDetails),
  model: z.string(),
  previous_response_id: nullable(z.string()),
  instructions: nullable(z.union([z.string(), z.array(z.unknown())])),
  output: z.array(OutputItem),
  error: nullable(ErrorObject),
  tools: z.array(z.union([FunctionTool, Tool])),
  tool_choice: ToolChoice,
  truncation: z.enum(['auto', 'disabled']),
  parallel_tool_calls: z.boolean(),
  text: TextField,
  top_p: z.number(),
  presence_penalty: z.number(),
  frequency_penalty: z.number(),
  top_logprobs: int,
  temperature: z.number(),
  reasoning: nullable(ReasoningConfig),
  user: nullable(z.string()),
  usage: nullable(Usage),
  max_output_tokens: nullable(int),
  max_tool_calls: nullable(int),
  store: z.boolean(),
  background: z.boolean(),
  service_tier: z.string(),
  metadata: z.record(z.string(), z.string()),
  safety_identifier: nullable(z.string()),
  prompt_cache_key: nullable(z.string()),
});
export type ResponseResource = z.infer<typeof ResponseResource>;

// --- Streaming events -----------------------------------------------------------------------

const event = <T extends string, S extends z.ZodRawShape>(type: T, shape: S) =>
  z.object({ type: z.literal(type), sequence_number: int, ...shape });

const lifecycle = (type: string) => event(type, { response: ResponseResource });

const reasoningDeltaShape = {
  item_id: z.string(),
  output_index: int,
  content_index: int,
  delta: z.string(),
};
const reasoningDoneShape = {
  item_id: z.string(),
  output_index: int,
  content_index: int,
  text: z.string(),
};

/** Every streaming event type sluice emits on `/v1/responses` (SSE and WebSocket). */
export const StreamingEvent = z.discriminatedUnion('type', [
  // ResponseCreated/Queued/InProgress/Completed/Failed/IncompleteStreamingEvent
  lifecycle('response.created'),
  lifecycle('response.queued'),
  lifecycle('response.in_progress'),
  lifecycle('response.completed'),
  lifecycle('response.failed'),
  lifecycle('response.incomplete'),
  // ResponseOutputItemAdded/DoneStreamingEvent
  event('response.output_item.added', { output_index: int, item: OutputItem }),
  event('response.output_item.done', { output_index: int, item: OutputItem }),
  // ResponseContentPartAdded/DoneStreamingEvent
  event('response.content_part.added', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    part: z.discriminatedUnion('type', [OutputTextContent, RefusalContent, ReasoningText]),
  }),
  event('response.content_part.done', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    part: z.discriminatedUnion('type', [OutputTextContent, RefusalContent, ReasoningText]),
  }),
  // ResponseOutputTextDelta/DoneStreamingEvent: logprobs is required on both
  event('response.output_text.delta', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    delta: z.string(),
    logprobs: z.array(LogProb),
  }),
  event('response.output_text.done', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    text: z.string(),
    logprobs: z.array(LogProb),
  }),
  // ResponseFunctionCallArgumentsDelta/DoneStreamingEvent
  event('response.function_call_arguments.delta', {
    item_id: z.string(),
    output_index: int,
    delta: z.string(),
  }),
  event('response.function_call_arguments.done', {
    item_id: z.string(),
    output_index: int,
    arguments: z.string(),
  }),
  // ResponseReasoningDelta/DoneStreamingEvent (the specification's names) ...
  event('response.reasoning.delta', reasoningDeltaShape),
  event('response.reasoning.done', reasoningDoneShape),
  // ... and sluice's names for the same events (ALLOWANCES.reasoningTextEventNames)
  event('response.reasoning_text.delta', reasoningDeltaShape),
  event('response.reasoning_text.done', reasoningDoneShape),
  // ResponseReasoningSummary* events
  event('response.reasoning_summary_part.added', {
    item_id: z.string(),
    output_index: int,
    summary_index: int,
    part: SummaryText,
  }),
  event('response.reasoning_summary_part.done', {
    item_id: z.string(),
    output_index: int,
    summary_index: int,
    part: SummaryText,
  }),
  event('response.reasoning_summary_text.delta', {
    item_id: z.string(),
    output_index: int,
    summary_index: int,
    delta: z.string(),
  }),
  event('response.reasoning_summary_text.done', {
    item_id: z.string(),
    output_index: int,
    summary_index: int,
    text: z.string(),
  }),
  // ErrorStreamingEvent
  event('error', {
    error: z.object({
      type: z.string(),
      code: nullable(z.string()),
      message: z.string(),
      param: nullable(z.string()),
    }),
  }),
]);
export type StreamingEvent = z.infer<typeof StreamingEvent>;

export const TERMINAL_EVENTS = new Set(['response.completed', 'response.failed', 'response.incomplete']);

/** The specification's names for the reasoning events; sluice's are allowed by ALLOWANCES.reasoningTextEventNames. */
export const SPEC_REASONING_EVENTS = ['response.reasoning.delta', 'response.reasoning.done'] as const;

// --- POST /responses/compact ----------------------------------------------------------------

/** `CompactResource`: id, object `response.compaction`, output, created_at, usage. */
export const CompactResource = z.object({
  id: z.string(),
  object: z.literal('response.compaction'),
  output: z.array(OutputItem),
  created_at: int,
  usage: Usage,
});

// --- WebSocket mode -------------------------------------------------------------------------

/** The WebSocket mode's error message: `type: "error"`, the HTTP status, and the error object. */
export const WebSocketError = z.object({
  type: z.literal('error'),
  status: int,
  error: z.object({
    type: z.string().optional(),
    code: z.string(),
    message: z.string(),
    param: nullable(z.string()).optional(),
  }),
});

/** A WebSocket message: a streaming event or an error. */
export const WebSocketMessage = z.union([StreamingEvent, WebSocketError]);

/** The issues of `schema` on `value`, as `path: message` lines (empty when it conforms). */
export function issues(schema: z.ZodType, value: unknown): string[] {
  const result = schema.safeParse(value);
  return result.success
    ? []
    : result.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
}
