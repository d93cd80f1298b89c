/**
 * The Open Responses specification's schemas, re-expressed in zod for sluice's conformance test
 * (test/open-responses-conformance.test.ts). Source: the specification at openresponses.org,
 * version 2026-04-24, its published OpenAPI document (`openapi.json`, `info.version`
 * "2026-04-24"), these components:
 *
 * - "The response object" (`ResponseResource`) and what it references: `ItemField` (`Message`,
 *   `FunctionCall`, `FunctionCallOutput`, `ReasoningBody`, `CompactionBody`), the content parts
 *   (`OutputTextContent`, `Annotation`, `LogProb`, ...), `Usage`, `Error`, `IncompleteDetails`,
 *   `Tool` (`FunctionTool`), the tool choices, `TextField`, `Reasoning`;
 * - the `text/event-stream` `oneOf` of `POST /responses`: the 24 `*StreamingEvent` schemas and
 *   `ErrorPayload`;
 * - "The compacted response object" (`CompactResource`) of `POST /responses/compact`;
 * - `WebSocketErrorEvent`, the `errorMessage` of the `x-openresponses-websocket` extension.
 *
 * Nothing here is copied from the specification's files: each schema states, in zod, the
 * required fields and their types and enums. The specification's objects do not declare
 * `additionalProperties: false` (WebSocketErrorEvent's error object explicitly allows more), so
 * none of these is `.strict()`: extra fields pass, as the specification lets them. A field the
 * specification lists as required is required here, `null` allowed only where it says
 * `anyOf [..., null]`; an optional field is checked by type when present.
 *
 * Sluice's known, deliberate differences are the named allowances in `ALLOWANCES` below, each
 * used in one place; nothing else is loosened.
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

// --- Content parts ---------------------------------------------------------------------------

/** `TopLogProb` and `LogProb`: token, logprob, bytes (and top_logprobs) all required. */
const TopLogProb = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(int) });
export const LogProb = TopLogProb.extend({ top_logprobs: z.array(TopLogProb) });

/** `Annotation` is `UrlCitationBody`: type, url, start_index, end_index, title. */
const Annotation = z.object({
  type: z.literal('url_citation'),
  url: z.string(),
  start_index: int,
  end_index: int,
  title: z.string(),
});

/** `OutputTextContent`: type, text and annotations required; logprobs optional (an array when present). */
export const OutputTextContent = z.object({
  type: z.literal('output_text'),
  text: z.string(),
  annotations: z.array(Annotation),
  logprobs: z.array(LogProb).optional(),
});
const InputTextContent = z.object({ type: z.literal('input_text'), text: z.string() });
const TextContent = z.object({ type: z.literal('text'), text: z.string() });
const SummaryTextContent = z.object({ type: z.literal('summary_text'), text: z.string() });
const ReasoningTextContent = z.object({ type: z.literal('reasoning_text'), text: z.string() });
const RefusalContent = z.object({ type: z.literal('refusal'), refusal: z.string() });
/** `InputImageContent`: type, image_url (nullable) and detail required. */
const InputImageContent = z.object({
  type: z.literal('input_image'),
  image_url: nullable(z.string()),
  detail: z.enum(['low', 'high', 'auto']),
});
const InputFileContent = z.object({
  type: z.literal('input_file'),
  filename: z.string().optional(),
  file_url: z.string().optional(),
});
const InputVideoContent = z.object({ type: z.literal('input_video'), video_url: z.string() });

/** The content-part union of `Message.content` and of the content_part / summary_part events. */
const contentParts = [
  InputTextContent,
  OutputTextContent,
  TextContent,
  SummaryTextContent,
  ReasoningTextContent,
  RefusalContent,
  InputImageContent,
  InputFileContent,
] as const;
const ContentPart = z.discriminatedUnion('type', [...contentParts]);

// --- Items (ItemField) -------------------------------------------------------------------------

/** `MessageStatus` (also `FunctionCallStatus`), `MessageRole`, the message `phase`. */
const ItemStatus = z.enum(['in_progress', 'completed', 'incomplete']);
const MessageRole = z.enum(['user', 'assistant', 'system', 'developer']);
export const MessagePhase = z.enum(['commentary', 'final_answer']);

/** `Message`: type, id, status, role, content required; `phase` optional (added in 2026-04-24). */
export const Message = z.object({
  type: z.literal('message'),
  id: z.string(),
  status: ItemStatus,
  role: MessageRole,
  content: z.array(z.discriminatedUnion('type', [...contentParts, InputVideoContent])),
  phase: MessagePhase.optional(),
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

/** `FunctionCallOutput`: type, id, call_id, output (a string or input parts), status required. */
const FunctionCallOutput = z.object({
  type: z.literal('function_call_output'),
  id: z.string(),
  call_id: z.string(),
  output: z.union([
    z.string(),
    z.array(z.discriminatedUnion('type', [InputTextContent, InputImageContent, InputFileContent])),
  ]),
  status: ItemStatus,
});

/** `ReasoningBody`: type, id, summary required; content and encrypted_content (a string) optional. */
export const ReasoningItem = z.object({
  type: z.literal('reasoning'),
  id: z.string(),
  summary: z.array(ContentPart),
  content: z.array(ContentPart).optional(),
  encrypted_content: z.string().optional(),
});

/** `CompactionBody`: type, id, encrypted_content required (see ALLOWANCES.compactionContentNotEncrypted). */
export const CompactionItem = z.object({
  type: z.literal('compaction'),
  id: z.string(),
  encrypted_content: z.string(),
  created_by: z.string().optional(),
});

/** `ItemField`: the five item types. Any other item type is a failure. */
export const OutputItem = z.discriminatedUnion('type', [
  Message,
  FunctionCall,
  FunctionCallOutput,
  ReasoningItem,
  CompactionItem,
]);

// --- The response object (ResponseResource) ------------------------------------------------

/** `Usage`: the three counts and both detail objects are required. */
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

/** `Tool` is `FunctionTool`: type, name, description, parameters, strict all required (the last three nullable). */
const FunctionTool = z.object({
  type: z.literal('function'),
  name: z.string(),
  description: nullable(z.string()),
  parameters: nullable(z.record(z.string(), z.unknown())),
  strict: nullable(z.boolean()),
});

/** `FunctionToolChoice`, `ToolChoiceValueEnum`, or `AllowedToolChoice`. */
const FunctionToolChoice = z.object({ type: z.literal('function'), name: z.string().optional() });
const ToolChoiceValue = z.enum(['none', 'auto', 'required']);
const ToolChoice = z.union([
  FunctionToolChoice,
  ToolChoiceValue,
  z.object({ type: z.literal('allowed_tools'), tools: z.array(FunctionToolChoice), mode: ToolChoiceValue }),
]);

/**
 * `TextField`: format required (`TextResponseFormat`, `JsonObjectResponseFormat`,
 * `JsonSchemaResponseFormat`), verbosity optional. `JsonSchemaResponseFormat` requires type, name,
 * description (nullable), schema and strict; the specification types `schema` as null, sluice
 * echoes the object (ALLOWANCES.jsonSchemaEchoesSchemaObject).
 */
const TextFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    name: z.string(),
    description: nullable(z.string()),
    schema: ALLOWANCES.jsonSchemaEchoesSchemaObject ? nullable(z.record(z.string(), z.unknown())) : z.null(),
    strict: z.boolean(),
  }),
]);
const TextField = z.object({
  format: TextFormat,
  verbosity: z.enum(['low', 'medium', 'high']).optional(),
});

/** `Reasoning` (the configuration): effort and summary both required, each nullable. */
const ReasoningConfig = z.object({
  effort: nullable(z.enum(['none', 'low', 'medium', 'high', 'xhigh'])),
  summary: nullable(z.enum(['concise', 'detailed', 'auto'])),
});

/**
 * The statuses a response takes. The specification types `ResponseResource.status` as a plain
 * string; the tests check this set as a semantic requirement, not as part of the schema.
 */
export const RESPONSE_STATUSES = ['queued', 'in_progress', 'completed', 'failed', 'incomplete', 'cancelled'];

/** `ResponseResource` ("The response object"): every field of its `required` list, typed as the spec types it. */
export const ResponseResource = z.object({
  id: z.string(),
  object: z.literal('response'),
  created_at: int,
  completed_at: nullable(int),
  status: z.string(),
  incomplete_details: nullable(IncompleteDetails),
  model: z.string(),
  previous_response_id: nullable(z.string()),
  instructions: nullable(z.string()),
  output: z.array(OutputItem),
  error: nullable(ErrorObject),
  tools: z.array(FunctionTool),
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
  usage: nullable(Usage),
  max_output_tokens: nullable(int),
  max_tool_calls: nullable(int),
  store: z.boolean(),
  background: z.boolean(),
  service_tier: z.string(),
  // Required, with no type given: any value but an absent one.
  metadata: z.unknown(),
  safety_identifier: nullable(z.string()),
  prompt_cache_key: nullable(z.string()),
});
export type ResponseResource = z.infer<typeof ResponseResource>;

// --- Streaming events -----------------------------------------------------------------------

const event = <T extends string, S extends z.ZodRawShape>(type: T, shape: S) =>
  z.object({ type: z.literal(type), sequence_number: int, ...shape });

const lifecycle = <T extends string>(type: T) => event(type, { response: ResponseResource });

const reasoningDeltaShape = { item_id: z.string(), output_index: int, content_index: int, delta: z.string() };
const reasoningDoneShape = { item_id: z.string(), output_index: int, content_index: int, text: z.string() };

/**
 * The streaming events of `POST /responses` (`text/event-stream`), which WebSocket mode sends
 * too: the `oneOf` of the specification's 24 event schemas, plus sluice's names for the
 * reasoning events (ALLOWANCES.reasoningTextEventNames). Any other event type is a failure.
 */
export const StreamingEvent = z.discriminatedUnion('type', [
  // Response{Created,Queued,InProgress,Completed,Failed,Incomplete}StreamingEvent
  lifecycle('response.created'),
  lifecycle('response.queued'),
  lifecycle('response.in_progress'),
  lifecycle('response.completed'),
  lifecycle('response.failed'),
  lifecycle('response.incomplete'),
  // ResponseOutputItem{Added,Done}StreamingEvent: item is an ItemField or null
  event('response.output_item.added', { output_index: int, item: nullable(OutputItem) }),
  event('response.output_item.done', { output_index: int, item: nullable(OutputItem) }),
  // ResponseReasoningSummaryPart{Added,Done}StreamingEvent
  event('response.reasoning_summary_part.added', {
    item_id: z.string(),
    output_index: int,
    summary_index: int,
    part: ContentPart,
  }),
  event('response.reasoning_summary_part.done', {
    item_id: z.string(),
    output_index: int,
    summary_index: int,
    part: ContentPart,
  }),
  // ResponseContentPart{Added,Done}StreamingEvent
  event('response.content_part.added', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    part: ContentPart,
  }),
  event('response.content_part.done', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    part: ContentPart,
  }),
  // ResponseOutputText{Delta,Done}StreamingEvent: logprobs optional, an array when present
  event('response.output_text.delta', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    delta: z.string(),
    logprobs: z.array(LogProb).optional(),
  }),
  event('response.output_text.done', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    text: z.string(),
    logprobs: z.array(LogProb).optional(),
  }),
  // ResponseRefusal{Delta,Done}StreamingEvent
  event('response.refusal.delta', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    delta: z.string(),
  }),
  event('response.refusal.done', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    refusal: z.string(),
  }),
  // ResponseReasoning{Delta,Done}StreamingEvent (the specification's names) ...
  event('response.reasoning.delta', reasoningDeltaShape),
  event('response.reasoning.done', reasoningDoneShape),
  // ... and sluice's names for the same events, with the same fields (ALLOWANCES.reasoningTextEventNames)
  event('response.reasoning_text.delta', reasoningDeltaShape),
  event('response.reasoning_text.done', reasoningDoneShape),
  // ResponseReasoningSummary{Delta,Done}StreamingEvent
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
  // ResponseOutputTextAnnotationAddedStreamingEvent
  event('response.output_text.annotation.added', {
    item_id: z.string(),
    output_index: int,
    content_index: int,
    annotation_index: int,
    annotation: nullable(Annotation),
  }),
  // ResponseFunctionCallArguments{Delta,Done}StreamingEvent
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
  // ErrorStreamingEvent: ErrorPayload requires type, code (nullable), message, param (nullable)
  event('error', {
    error: z.object({
      type: z.string(),
      code: nullable(z.string()),
      message: z.string(),
      param: nullable(z.string()),
      headers: z.record(z.string(), z.string()).optional(),
    }),
  }),
]);
export type StreamingEvent = z.infer<typeof StreamingEvent>;

export const TERMINAL_EVENTS = new Set(['response.completed', 'response.failed', 'response.incomplete']);

/** The specification's names for the reasoning events; sluice's are allowed by ALLOWANCES.reasoningTextEventNames. */
export const SPEC_REASONING_EVENTS = ['response.reasoning.delta', 'response.reasoning.done'] as const;

// --- POST /responses/compact ----------------------------------------------------------------

/** `CompactResource` ("The compacted response object"): id, object, output (ItemField), created_at, usage. */
export const CompactResource = z.object({
  id: z.string(),
  object: z.literal('response.compaction'),
  output: z.array(OutputItem),
  created_at: int,
  usage: Usage,
});

// --- WebSocket mode -------------------------------------------------------------------------

/**
 * `WebSocketErrorEvent` (the `errorMessage` of `x-openresponses-websocket`): type `error`, status
 * (an integer), error with code and message required, type and param (nullable) optional.
 */
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

/** A WebSocket server message: a streaming event (the same schemas as SSE) or a WebSocketErrorEvent. */
export const WebSocketMessage = z.union([StreamingEvent, WebSocketError]);

/** The issues of `schema` on `value`, as `path: message` lines (empty when it conforms). */
export function issues(schema: z.ZodType, value: unknown): string[] {
  const result = schema.safeParse(value);
  return result.success
    ? []
    : result.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
}
