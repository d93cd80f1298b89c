import { chatPromptText } from '../chat/request-schema.js';
import { mcpSettingsSchema } from '../config/schema.js';
import type { DispatchRequest } from '../dispatch/dispatcher.js';
import type { Engine } from '../dispatch/engine.js';
import type { ResumableStream, ResumePlan } from '../dispatch/resumable-stream.js';
import type { ModelRule } from '../dispatch/types.js';
import { InvalidValue } from '../errors/request-errors.js';
import type { FlowTicket } from '../flow/flow-control.js';
import type { RequestTrace } from '../observability/tracing.js';
import type { Store } from '../storage/types.js';
import { assertOutputsAnswerCalls } from './call-outputs.js';
import { contextSource, type ResolvedContext, resolveContext } from './context.js';
import { newId } from './ids.js';
import { extractPdfTexts } from './input-files.js';
import { normaliseInput } from './input-items.js';
import { echoMcpTool, type McpSession, McpTools } from './mcp-loop.js';
import type { Caller } from './ownership.js';
import type { PdfReader } from './pdf-reader.js';
import type { CreateResponseRequest } from './request-schema.js';
import { type ChatMessage, contextToMessages, toChatRequest } from './to-chat.js';
import type { InputItem, ResponseObject } from './types.js';

/** How the HTTP layer describes a create call. */
export interface CreateCall {
  request: CreateResponseRequest;
  requestId: string;
  /** Whether the model's routing policy wants the prompt text (cache_aware). */
  wantsText: boolean;
  hashKey: string | undefined;
  /** Its tenant, priority class and queue deadline (flow control). */
  flow?: FlowTicket | undefined;
  /** The request's X-Sluice-Resume override. */
  resume: boolean | undefined;
  /** Sees the final usage (for the calling key's counters), once the response has ended. */
  onUsage?: ((usage: { prompt_tokens: number; completion_tokens: number } | undefined) => void) | undefined;
  headers: Record<string, string>;
  /** Aborted when the client goes away (ignored by background responses). */
  signal: AbortSignal;
  receivedAt: number;
  /** The request's spans, when tracing is on and it is sampled. */
  trace?: RequestTrace | undefined;
  /** The calling API key: it owns the response, and may only build on what it owns. */
  caller: Caller;
  /** The models the client named to answer when its own cannot (checked by the pipeline). */
  fallbacks?: readonly string[] | undefined;
  /** Which models the calling key may use (undefined: every model); the chain obeys it. */
  mayUse: ModelRule | undefined;
  /** What came before, already resolved (a WebSocket connection's own cache); else read from the store. */
  context?: ResolvedContext | undefined;
}

/** Without MCP settings, no MCP server is allowed. */
export const NO_MCP = new McpTools(mcpSettingsSchema.parse({ allowedServers: [], toolCacheMs: 0 }));

/**
 * The Responses API's translation: a create request, with what it continues from (a chain of
 * responses or a conversation), its PDFs read and its MCP tools listed, becomes one engine
 * chat-completions request and the response object its events build. Nothing starts here; every
 * refusal (an unknown model or id, a bound, an answer to no call) is thrown before anything does.
 */
export class ResponseTranslator {
  constructor(
    private readonly engine: Pick<Engine, 'assertModel' | 'assertOutputTokens' | 'resumePlan'>,
    /** Where earlier responses and conversations are read (undefined: storage is off). */
    private readonly history: Store | undefined,
    readonly pdf: PdfReader,
    private readonly mcp: McpTools = NO_MCP,
  ) {}

  /** Whether responses can be stored. */
  private get stored(): boolean {
    return this.history !== undefined;
  }

  /** Validates and prepares a create call; throws HTTP errors (404 for unknown ids) before anything starts. */
  async prepare(call: CreateCall): Promise<PreparedResponse> {
    const { engine } = this;
    const { request } = call;
    engine.assertModel(request.model);
    engine.assertOutputTokens(request.model, 'max_output_tokens', request.max_output_tokens);
    const store = request.store !== false;
    if (request.background && !store) {
      throw new InvalidValue('Background responses need store=true.', 'background');
    }
    if (store && !this.stored)
      throw new InvalidValue('This gateway has no storage configured; send store=false.', 'store');
    const context = call.context ?? (await resolveContext(this.history, request, call.caller));
    const input = normaliseInput(request.input);
    assertOutputsAnswerCalls(context.history, input, contextSource(context, 'input'));
    await extractPdfTexts(this.pdf, [...context.history, ...input]);
    const mcp = await this.mcp.prepare(request, context.history, input, call.signal);
    const messages = contextToMessages(request.instructions, [...context.history, ...input]);
    if (mcp) messages.push(...mcp.messages);
    const response = baseResponse(request, context.previousResponseId, context.conversationId, store);
    const chatBody = toChatRequest(request, messages);
    mcp?.decorate(chatBody);
    const payload = JSON.stringify(chatBody);
    const dispatch: DispatchRequest = {
      api: 'responses',
      path: '/v1/chat/completions',
      model: request.model,
      payload,
      stream: true,
      requestId: call.requestId,
      route: {
        model: request.model,
        text: call.wantsText ? chatPromptText({ messages }) : undefined,
        hashKey: call.hashKey,
      },
      rank: undefined,
      headers: call.headers,
      signal: call.signal,
      receivedAt: call.receivedAt,
      trace: call.trace,
      fallbacks: call.fallbacks,
      mayUse: call.mayUse,
      flow: call.flow,
    };
    return {
      response,
      input,
      dispatch,
      store,
      conversationId: context.conversationId,
      history: context.history,
      ownerKeyId: call.caller,
      resume: (dispatchRequest, body = chatBody) => engine.resumePlan(dispatchRequest, body, call.resume),
      onUsage: call.onUsage,
      mcp: mcp ? { session: mcp, messages, turns: [] } : undefined,
    };
  }
}

export interface PreparedResponse {
  response: ResponseObject;
  input: InputItem[];
  dispatch: DispatchRequest;
  store: boolean;
  conversationId: string | null;
  /** What the response continues (its previous responses' items, or its conversation's). */
  history: ResolvedContext['history'];
  /** The API key that owns the response (null: made while the gateway ran open). */
  ownerKeyId: Caller;
  /** How the stream may be resumed mid-stream (undefined: it may not). */
  resume: (dispatch: DispatchRequest, body?: Record<string, unknown>) => ResumePlan | undefined;
  /** The MCP tool loop of the response (its MCP servers, and the chat messages of its first turn). */
  mcp?: { session: McpSession; messages: ChatMessage[]; turns: ResumableStream[] } | undefined;
  onUsage: CreateCall['onUsage'];
}

function baseResponse(
  request: CreateResponseRequest,
  previousResponseId: string | null,
  conversationId: string | null,
  store: boolean,
): ResponseObject {
  return {
    id: newId('resp'),
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'in_progress',
    background: request.background === true,
    completed_at: null,
    error: null,
    incomplete_details: null,
    instructions: request.instructions ?? null,
    max_output_tokens: request.max_output_tokens ?? null,
    model: request.model,
    output: [],
    parallel_tool_calls: request.parallel_tool_calls ?? true,
    previous_response_id: previousResponseId,
    conversation: conversationId ? { id: conversationId } : null,
    reasoning: { effort: request.reasoning?.effort ?? null, summary: request.reasoning?.summary ?? null },
    store,
    temperature: request.temperature ?? 1,
    text: { format: echoedFormat(request.text?.format as Record<string, unknown> | undefined) },
    tool_choice: request.tool_choice ?? 'auto',
    tools: (request.tools ?? []).map((tool) =>
      tool.type === 'mcp'
        ? echoMcpTool(tool)
        : {
            type: 'function',
            name: tool.name,
            description: tool.description ?? null,
            parameters: tool.parameters ?? null,
            strict: tool.strict ?? true,
          },
    ),
    top_p: request.top_p ?? 1,
    truncation: request.truncation ?? 'disabled',
    presence_penalty: request.presence_penalty ?? 0,
    frequency_penalty: request.frequency_penalty ?? 0,
    top_logprobs: request.top_logprobs ?? 0,
    max_tool_calls: request.max_tool_calls ?? null,
    service_tier: request.service_tier ?? 'default',
    safety_identifier: request.safety_identifier ?? null,
    prompt_cache_key: request.prompt_cache_key ?? null,
    usage: null,
    user: request.user ?? null,
    metadata: request.metadata ?? {},
  };
}

/**
 * The text format as the response echoes it. A `json_schema` format carries every field Open
 * Responses requires of it (`name`, `description`, `schema`, `strict`), those the request left out
 * as null (description) or false (strict, the API's default).
 */
function echoedFormat(format: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!format) return { type: 'text' };
  if (format.type !== 'json_schema') return format;
  return { ...format, description: format.description ?? null, strict: format.strict ?? false };
}
