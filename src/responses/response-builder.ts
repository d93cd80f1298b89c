import type { ParsedChunk, Usage } from '../streams/chat-stream-tracker.js';
import { newId } from './ids.js';
import type {
  FunctionCallItem,
  ItemStatus,
  McpApprovalRequestItem,
  McpCallItem,
  MessageItem,
  OutputItem,
  OutputText,
  ReasoningItem,
  ReasoningText,
  ResponseEventBody,
  ResponseObject,
  ResponseStatus,
  ResponseUsage,
} from './types.js';

/** Receives each event as JSON text, in order, with its type. */
export type EventSink = (json: string, type: string) => void;

interface ToolCallDelta {
  index?: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}

interface ChoiceDelta {
  content?: unknown;
  reasoning_content?: unknown;
  reasoning?: unknown;
  tool_calls?: ToolCallDelta[];
}

type TextKind = 'message' | 'reasoning';

/** A tool call being streamed: a function call for the client, or an MCP call the gateway makes. */
type CallItem = FunctionCallItem | McpCallItem | McpApprovalRequestItem;

interface OpenCall {
  item: CallItem;
  index: number;
  /** The engine's id of the call (the chat `tool_call_id`). */
  callId: string;
}

/** Claims the tool calls of MCP tools by their function name (see responses/mcp-loop.ts). */
export interface ToolCallRouter {
  route(name: string): { serverLabel: string; toolName: string; approval: boolean } | undefined;
}

/** A tool call of a finished turn, as `endTurn()` hands it over. */
export interface TurnCall {
  item: CallItem;
  index: number;
  callId: string;
}

interface OpenText {
  item: MessageItem | ReasoningItem;
  index: number;
}

/** How the two kinds of text item differ on the wire. */
const TEXT_EVENTS = {
  message: {
    delta: 'response.output_text.delta',
    done: 'response.output_text.done',
    extra: { logprobs: [] },
    part: (): OutputText => ({ type: 'output_text', text: '', annotations: [], logprobs: [] }),
  },
  reasoning: {
    delta: 'response.reasoning_text.delta',
    done: 'response.reasoning_text.done',
    extra: {},
    part: (): ReasoningText => ({ type: 'reasoning_text', text: '' }),
  },
} as const;

export type TerminalKind =
  | { kind: 'finished'; finishReason: string | undefined }
  | { kind: 'failed'; code: string; message: string }
  /** Cut short by a bound of the gateway (the MCP tool loop's turns): `incomplete_details.reason`. */
  | { kind: 'incomplete'; reason: string }
  | { kind: 'cancelled' };

export interface BuiltEvent {
  json: string;
  type: string;
}

/** A terminal not yet published: the closing events, then the terminal event around the final JSON. */
export interface TerminalDraft {
  responseJson: string;
  eventJson: string;
  type: string;
  status: ResponseStatus;
  closing: BuiltEvent[];
}

interface Snapshot {
  sequence: number;
  text: Record<TextKind, OpenText | undefined>;
  calls: Map<number, OpenCall>;
  running: Map<string, { item: McpCallItem; index: number }>;
  statuses: OutputItem['status'][];
  status: ResponseStatus;
  completedAt: number | null;
  error: ResponseObject['error'];
  incompleteDetails: ResponseObject['incomplete_details'];
}

export function toResponseUsage(usage: Usage): ResponseUsage {
  const details = usage as {
    prompt_tokens_details?: { cached_tokens?: number } | null;
    completion_tokens_details?: { reasoning_tokens?: number } | null;
  };
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: details.prompt_tokens_details?.cached_tokens ?? 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: details.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: usage.total_tokens,
  };
}

/**
 * Turns the chunks of one chat-completions stream into the Responses event ladder
 * (shared/STREAMS.md section 2) while keeping the response object current. Every event gets
 * the next `sequence_number`. `terminal()` closes every item still open (as completed, or as
 * incomplete with its partial text when the response did not complete) and builds the one
 * terminal event around the exact JSON text of the final response, which is also what gets stored.
 */
export class ResponseBuilder {
  private sequence = 0;
  /** The message and the reasoning item being written, at most one of each. */
  private readonly text: Record<TextKind, OpenText | undefined> = {
    message: undefined,
    reasoning: undefined,
  };
  private readonly calls = new Map<number, OpenCall>();
  /** MCP calls whose arguments are complete, being made by the gateway (closed as incomplete if the response ends). */
  private readonly running = new Map<string, { item: McpCallItem; index: number }>();
  /** Set by the MCP tool loop: which tool calls are MCP calls. */
  toolRouter: ToolCallRouter | undefined;
  private finishReason: string | undefined;
  /** The closing events of a terminal being drafted. */
  private pending: BuiltEvent[] | undefined;
  /** The state before the draft terminal, to retract it. */
  private saved: Snapshot | undefined;

  constructor(
    readonly response: ResponseObject,
    private readonly sink: EventSink,
  ) {}

  get nextSequence(): number {
    return this.sequence;
  }

  /**
   * `response.created` then `response.in_progress`; for a background response that waits,
   * `response.created` (status queued) then `response.queued`, and `started()` later.
   */
  begin(queued = false): void {
    if (queued) {
      this.response.status = 'queued';
      this.emitResponse('response.created');
      this.emitResponse('response.queued');
      return;
    }
    this.response.status = 'in_progress';
    this.emitResponse('response.created');
    this.emitResponse('response.in_progress');
  }

  /** `response.in_progress` for a queued background response that starts now. */
  started(): void {
    this.response.status = 'in_progress';
    this.emitResponse('response.in_progress');
  }

  chunk(chunk: ParsedChunk): void {
    if (chunk.usage) this.response.usage = toResponseUsage(chunk.usage);
    const choice = chunk.choices?.[0];
    if (!choice) return;
    const delta = choice.delta as ChoiceDelta | undefined;
    if (delta) {
      const reasoning = delta.reasoning_content ?? delta.reasoning;
      if (typeof reasoning === 'string' && reasoning.length > 0) this.reasoningDelta(reasoning);
      if (typeof delta.content === 'string' && delta.content.length > 0) this.textDelta(delta.content);
      if (Array.isArray(delta.tool_calls)) for (const call of delta.tool_calls) this.toolCallDelta(call);
    }
    if (typeof choice.finish_reason === 'string') this.finishReason = choice.finish_reason;
  }

  /**
   * Closes what is open and returns the final response object's JSON text with the terminal
   * event built around it. Nothing is emitted: the closing events (the done ladders of the items
   * still open) and the terminal event are returned, for the caller to store, then publish.
   * Until then it is a draft: calling `terminal()` again replaces it, reusing the same sequence
   * numbers (a response that could not be stored ends as failed instead, without a gap).
   */
  terminal(end: TerminalKind): TerminalDraft {
    this.retract();
    this.saved = this.snapshot();
    this.pending = [];
    let status: ResponseStatus;
    let type: string;
    if (end.kind === 'finished') {
      const reason = end.finishReason ?? this.finishReason;
      if (reason === 'length' || reason === 'content_filter') {
        status = 'incomplete';
        type = 'response.incomplete';
        this.response.incomplete_details = {
          reason: reason === 'length' ? 'max_output_tokens' : 'content_filter',
        };
      } else {
        status = 'completed';
        type = 'response.completed';
      }
    } else if (end.kind === 'incomplete') {
      status = 'incomplete';
      type = 'response.incomplete';
      this.response.incomplete_details = { reason: end.reason };
    } else if (end.kind === 'failed') {
      status = 'failed';
      type = 'response.failed';
      this.response.error = { code: end.code, message: end.message };
    } else {
      status = 'cancelled';
      type = 'response.failed';
      this.response.error = { code: 'response_cancelled', message: 'The response was cancelled.' };
    }
    this.closeAll(status === 'completed' ? 'completed' : 'incomplete');
    this.response.status = status;
    if (status === 'completed' || status === 'incomplete')
      this.response.completed_at = Math.floor(Date.now() / 1000);
    const closing = this.pending;
    this.pending = undefined;
    const responseJson = JSON.stringify(this.response);
    const eventJson = `{"type":"${type}","sequence_number":${this.sequence++},"response":${responseJson}}`;
    return { responseJson, eventJson, type, status, closing };
  }

  /**
   * Replaces the draft terminal with one around a response object that was stored elsewhere
   * (another replica ended this response first): what the client sees last is what is stored.
   */
  adopt(responseJson: string, status: ResponseStatus): TerminalDraft {
    this.retract();
    this.saved = this.snapshot();
    const type =
      status === 'completed'
        ? 'response.completed'
        : status === 'incomplete'
          ? 'response.incomplete'
          : 'response.failed';
    const eventJson = `{"type":"${type}","sequence_number":${this.sequence++},"response":${responseJson}}`;
    return { responseJson, eventJson, type, status, closing: [] };
  }

  /** Undoes the draft terminal, if any: items open again, sequence numbers back. */
  private retract(): void {
    const saved = this.saved;
    if (!saved) return;
    this.saved = undefined;
    this.sequence = saved.sequence;
    this.text.message = saved.text.message;
    this.text.reasoning = saved.text.reasoning;
    this.calls.clear();
    for (const [key, open] of saved.calls) this.calls.set(key, open);
    this.running.clear();
    for (const [key, open] of saved.running) this.running.set(key, open);
    saved.statuses.forEach((status, index) => {
      const item = this.response.output[index];
      if (item) (item as { status: OutputItem['status'] }).status = status;
    });
    this.response.status = saved.status;
    this.response.completed_at = saved.completedAt;
    this.response.error = saved.error;
    this.response.incomplete_details = saved.incompleteDetails;
  }

  private snapshot(): Snapshot {
    return {
      sequence: this.sequence,
      text: { ...this.text },
      calls: new Map(this.calls),
      running: new Map(this.running),
      statuses: this.response.output.map((item) => item.status),
      status: this.response.status,
      completedAt: this.response.completed_at,
      error: this.response.error,
      incompleteDetails: this.response.incomplete_details,
    };
  }

  /**
   * A builder that carries on a response stored mid-way (its JSON and the sequence number after
   * its last stored event): its items still `in_progress` are open again, to be closed by `terminal()`.
   */
  static resume(response: ResponseObject, nextSequence: number): ResponseBuilder {
    const builder = new ResponseBuilder(response, () => {});
    builder.sequence = nextSequence;
    response.output.forEach((item, index) => {
      if (item.status !== 'in_progress' && item.status !== 'calling') return;
      if (item.type === 'function_call' || item.type === 'mcp_call' || item.type === 'mcp_approval_request') {
        builder.calls.set(-1 - index, { item, index, callId: '' });
        return;
      }
      if (item.type === 'mcp_list_tools') return;
      if (item.content.length === 0) {
        const part = TEXT_EVENTS[item.type].part();
        (item.content as (OutputText | ReasoningText)[]).push(part);
      }
      builder.text[item.type] = { item, index };
    });
    return builder;
  }

  /** Emits one event with the next sequence number (the MCP tool loop's own events). */
  emit(body: ResponseEventBody): void {
    const { type, ...fields } = body;
    this.send(JSON.stringify({ type, sequence_number: this.sequence++, ...fields }), type);
  }

  private emitResponse(type: string): void {
    this.send(
      `{"type":"${type}","sequence_number":${this.sequence++},"response":${JSON.stringify(this.response)}}`,
      type,
    );
  }

  /** To the sink, or, while a terminal is drafted, to its closing events. */
  private send(json: string, type: string): void {
    if (this.pending) this.pending.push({ json, type });
    else this.sink(json, type);
  }

  /** Adds an output item (`response.output_item.added`); returns its output index. */
  addItem<T extends OutputItem>(item: T): number {
    const index = this.response.output.length;
    this.response.output.push(item);
    // Serialised at once: the event shows the item as it starts, before any content.
    this.emit({ type: 'response.output_item.added', output_index: index, item });
    return index;
  }

  private reasoningDelta(text: string): void {
    this.closeText('message', 'completed');
    this.appendText('reasoning', text);
  }

  private textDelta(text: string): void {
    this.closeText('reasoning', 'completed');
    this.appendText('message', text);
  }

  /** Appends to the open message or reasoning item, opening it (added, content_part.added) first. */
  private appendText(kind: TextKind, text: string): void {
    let open = this.text[kind];
    if (!open) {
      const id = newId(kind === 'message' ? 'msg' : 'rs');
      const item: MessageItem | ReasoningItem =
        kind === 'message'
          ? { id, type: 'message', status: 'in_progress', role: 'assistant', content: [] }
          : { id, type: 'reasoning', status: 'in_progress', summary: [], content: [] };
      const index = this.addItem(item);
      const part = TEXT_EVENTS[kind].part();
      this.emit({
        type: 'response.content_part.added',
        item_id: id,
        output_index: index,
        content_index: 0,
        part,
      });
      (item.content as (OutputText | ReasoningText)[]).push({ ...part });
      open = { item, index };
      this.text[kind] = open;
    }
    open.item.content[0]!.text += text;
    this.emit({
      type: TEXT_EVENTS[kind].delta,
      item_id: open.item.id,
      output_index: open.index,
      content_index: 0,
      delta: text,
      ...TEXT_EVENTS[kind].extra,
    });
  }

  private toolCallDelta(delta: ToolCallDelta): void {
    const key = typeof delta.index === 'number' ? delta.index : 0;
    let open = this.calls.get(key);
    if (!open) {
      this.closeText('reasoning', 'completed');
      this.closeText('message', 'completed');
      for (const other of this.calls.keys()) this.closeCall(other, 'completed');
      const callId = delta.id ?? newId('call');
      const name = delta.function?.name ?? '';
      const mcp = name ? this.toolRouter?.route(name) : undefined;
      let item: CallItem;
      if (mcp?.approval) {
        item = {
          id: newId('mcpr'),
          type: 'mcp_approval_request',
          status: 'in_progress',
          server_label: mcp.serverLabel,
          name: mcp.toolName,
          arguments: '',
        };
      } else if (mcp) {
        item = {
          id: newId('mcp'),
          type: 'mcp_call',
          status: 'in_progress',
          server_label: mcp.serverLabel,
          name: mcp.toolName,
          arguments: '',
          output: null,
          error: null,
          approval_request_id: null,
        };
      } else {
        item = {
          id: newId('fc'),
          type: 'function_call',
          status: 'in_progress',
          arguments: '',
          call_id: callId,
          name,
        };
      }
      open = { item, index: this.addItem(item), callId };
      this.calls.set(key, open);
      if (item.type === 'mcp_call')
        this.emit({ type: 'response.mcp_call.in_progress', item_id: item.id, output_index: open.index });
    } else if (delta.function?.name && !open.item.name && open.item.type === 'function_call') {
      open.item.name = delta.function.name;
    }
    const fragment = delta.function?.arguments;
    if (typeof fragment === 'string' && fragment.length > 0) {
      open.item.arguments += fragment;
      // An approval request is shown whole, when it is done.
      if (open.item.type !== 'mcp_approval_request')
        this.emit({
          type:
            open.item.type === 'mcp_call'
              ? 'response.mcp_call_arguments.delta'
              : 'response.function_call_arguments.delta',
          item_id: open.item.id,
          output_index: open.index,
          delta: fragment,
        });
    }
  }

  /**
   * Ends an engine turn of the MCP tool loop: closes its text, reasoning and function calls as
   * completed and returns its tool calls. MCP calls get their `mcp_call_arguments.done` and stay
   * open (`running`) until `mcpCallDone`; a response that ends meanwhile closes them as incomplete.
   */
  endTurn(): TurnCall[] {
    this.closeText('reasoning', 'completed');
    this.closeText('message', 'completed');
    const calls: TurnCall[] = [];
    for (const [key, open] of [...this.calls]) {
      calls.push({ item: open.item, index: open.index, callId: open.callId });
      if (open.item.type === 'mcp_call') {
        this.calls.delete(key);
        this.mcpArgumentsDone(open.item, open.index);
        this.running.set(open.item.id, { item: open.item, index: open.index });
      } else this.closeCall(key, 'completed');
    }
    return calls;
  }

  /** Tracks an MCP call the loop made outside a turn (an approved call), until `mcpCallDone`. */
  trackMcpCall(item: McpCallItem, index: number): void {
    this.running.set(item.id, { item, index });
  }

  private mcpArgumentsDone(item: McpCallItem, index: number): void {
    this.emit({
      type: 'response.mcp_call_arguments.done',
      item_id: item.id,
      output_index: index,
      arguments: item.arguments,
    });
  }

  /** An MCP call ended: `response.mcp_call.completed` (or `.failed`), then its `output_item.done`. */
  mcpCallDone(itemId: string, result: { output?: string | undefined; error?: string | undefined }): void {
    const open = this.running.get(itemId);
    if (!open) return;
    this.running.delete(itemId);
    const { item, index } = open;
    if (result.error !== undefined) {
      item.error = result.error;
      item.status = 'failed';
    } else {
      item.output = result.output ?? '';
      item.status = 'completed';
    }
    this.emit({
      type: item.status === 'failed' ? 'response.mcp_call.failed' : 'response.mcp_call.completed',
      item_id: item.id,
      output_index: index,
    });
    this.emit({ type: 'response.output_item.done', output_index: index, item });
  }

  private closeAll(status: ItemStatus): void {
    this.closeText('reasoning', status);
    this.closeText('message', status);
    for (const key of [...this.calls.keys()]) this.closeCall(key, status);
    for (const [id, { item, index }] of [...this.running]) {
      this.running.delete(id);
      item.status = status;
      this.emit({ type: 'response.output_item.done', output_index: index, item });
    }
  }

  /** The done ladder of a message or reasoning item: text done, content_part.done, output_item.done. */
  private closeText(kind: TextKind, status: ItemStatus): void {
    const open = this.text[kind];
    if (!open) return;
    this.text[kind] = undefined;
    const { item, index } = open;
    const part = item.content[0]!;
    this.emit({
      type: TEXT_EVENTS[kind].done,
      item_id: item.id,
      output_index: index,
      content_index: 0,
      text: part.text,
      ...TEXT_EVENTS[kind].extra,
    });
    this.emit({
      type: 'response.content_part.done',
      item_id: item.id,
      output_index: index,
      content_index: 0,
      part,
    });
    item.status = status;
    this.emit({ type: 'response.output_item.done', output_index: index, item });
  }

  private closeCall(key: number, status: ItemStatus): void {
    const open = this.calls.get(key);
    if (!open) return;
    this.calls.delete(key);
    const { item, index } = open;
    if (item.type === 'mcp_call') this.mcpArgumentsDone(item, index);
    else if (item.type === 'function_call')
      this.emit({
        type: 'response.function_call_arguments.done',
        item_id: item.id,
        output_index: index,
        name: item.name,
        arguments: item.arguments,
      });
    item.status = status;
    this.emit({ type: 'response.output_item.done', output_index: index, item });
  }
}
