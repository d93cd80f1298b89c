import type { ParsedChunk } from '../streams/chat-stream-tracker.js';
import { EventSequence, type EventSink } from './event-sequence.js';
import { RunningMcpCalls, type RunningMcpCallsSaved } from './mcp-call-items.js';
import { type OpenTexts, TextItems } from './message-and-reasoning-items.js';
import { toResponseUsage } from './response-usage.js';
import {
  endStatus,
  type ResponseFieldsSaved,
  restoreResponseFields,
  saveResponseFields,
  type TerminalDraft,
  type TerminalKind,
  terminalEventJson,
  terminalType,
} from './terminal-draft.js';
import {
  type OpenCallsSaved,
  type ToolCallDelta,
  ToolCallItems,
  type ToolCallRouter,
  type TurnCall,
} from './tool-call-items.js';
import type { McpCallItem, OutputItem, ResponseEventBody, ResponseObject, ResponseStatus } from './types.js';

export type { BuiltEvent, EventSink } from './event-sequence.js';
export { toResponseUsage } from './response-usage.js';
export type { TerminalDraft, TerminalKind } from './terminal-draft.js';
export type { ToolCallRouter, TurnCall } from './tool-call-items.js';

interface ChoiceDelta {
  content?: unknown;
  reasoning_content?: unknown;
  reasoning?: unknown;
  tool_calls?: ToolCallDelta[];
}

/** The state before a draft terminal, to retract it. */
interface Snapshot {
  sequence: number;
  texts: OpenTexts;
  calls: OpenCallsSaved;
  running: RunningMcpCallsSaved;
  response: ResponseFieldsSaved;
}

/**
 * Turns the chunks of one chat-completions stream into the Responses event ladder
 * (shared/STREAMS.md section 2) while keeping the response object current. Every event gets
 * the next `sequence_number`. `terminal()` closes every item still open (as completed, or as
 * incomplete with its partial text when the response did not complete) and builds the one
 * terminal event around the exact JSON text of the final response, which is also what gets stored.
 *
 * The items are built by kind: message-and-reasoning-items.ts, tool-call-items.ts (function
 * and MCP calls as streamed), mcp-call-items.ts (MCP calls being made); terminal-draft.ts decides
 * how the response ends; event-sequence.ts numbers the events.
 */
export class ResponseBuilder {
  private readonly events: EventSequence;
  private readonly texts: TextItems;
  /** MCP calls whose arguments are complete, being made by the gateway (closed as incomplete if the response ends). */
  private readonly running: RunningMcpCalls;
  private readonly calls: ToolCallItems;
  /** Set by the MCP tool loop: which tool calls are MCP calls. */
  toolRouter: ToolCallRouter | undefined;
  private finishReason: string | undefined;
  /** The state before the draft terminal, to retract it. */
  private saved: Snapshot | undefined;
  /**
   * Characters of text, reasoning and tool arguments taken so far: the closing events and the
   * final response repeat each of them (what a run will hold by its end: ResponseRun).
   */
  contentChars = 0;

  constructor(
    readonly response: ResponseObject,
    sink: EventSink,
  ) {
    this.events = new EventSequence(response, sink);
    this.texts = new TextItems(this.events);
    this.running = new RunningMcpCalls(this.events);
    this.calls = new ToolCallItems(this.events, this.texts, this.running);
  }

  get nextSequence(): number {
    return this.events.next;
  }

  /**
   * `response.created` then `response.in_progress`; for a background response that waits,
   * `response.created` (status queued) then `response.queued`, and `started()` later.
   */
  begin(queued = false): void {
    if (queued) {
      this.response.status = 'queued';
      this.events.emitResponse('response.created');
      this.events.emitResponse('response.queued');
      return;
    }
    this.response.status = 'in_progress';
    this.events.emitResponse('response.created');
    this.events.emitResponse('response.in_progress');
  }

  /** `response.in_progress` for a queued background response that starts now. */
  started(): void {
    this.response.status = 'in_progress';
    this.events.emitResponse('response.in_progress');
  }

  chunk(chunk: ParsedChunk): void {
    if (chunk.usage) this.response.usage = toResponseUsage(chunk.usage);
    const choice = chunk.choices?.[0];
    if (!choice) return;
    const delta = choice.delta as ChoiceDelta | undefined;
    if (delta) {
      const reasoning = delta.reasoning_content ?? delta.reasoning;
      if (typeof reasoning === 'string' && reasoning.length > 0) {
        this.contentChars += reasoning.length;
        this.texts.reasoningDelta(reasoning);
      }
      if (typeof delta.content === 'string' && delta.content.length > 0) {
        this.contentChars += delta.content.length;
        this.texts.messageDelta(delta.content);
      }
      if (Array.isArray(delta.tool_calls))
        for (const call of delta.tool_calls) {
          const args = call.function?.arguments;
          if (typeof args === 'string') this.contentChars += args.length;
          this.calls.delta(call, this.toolRouter);
        }
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
    this.events.holdClosing();
    const status = endStatus(this.response, end, this.finishReason);
    const type = terminalType(status);
    const itemStatus = status === 'completed' ? 'completed' : 'incomplete';
    this.texts.closeBoth(itemStatus);
    this.calls.closeAll(itemStatus);
    this.running.closeAll(itemStatus);
    this.response.status = status;
    if (status === 'completed' || status === 'incomplete')
      this.response.completed_at = Math.floor(Date.now() / 1000);
    const closing = this.events.takeClosing();
    const responseJson = JSON.stringify(this.response);
    const eventJson = terminalEventJson(type, this.events.next++, responseJson);
    return { responseJson, eventJson, type, status, closing };
  }

  /**
   * Replaces the draft terminal with one around a response object that was stored elsewhere
   * (another replica ended this response first): what the client sees last is what is stored.
   */
  adopt(responseJson: string, status: ResponseStatus): TerminalDraft {
    this.retract();
    this.saved = this.snapshot();
    const type = terminalType(status);
    const eventJson = terminalEventJson(type, this.events.next++, responseJson);
    return { responseJson, eventJson, type, status, closing: [] };
  }

  /** Undoes the draft terminal, if any: items open again, sequence numbers back. */
  private retract(): void {
    const saved = this.saved;
    if (!saved) return;
    this.saved = undefined;
    this.events.next = saved.sequence;
    this.texts.restore(saved.texts);
    this.calls.restore(saved.calls);
    this.running.restore(saved.running);
    restoreResponseFields(this.response, saved.response);
  }

  private snapshot(): Snapshot {
    return {
      sequence: this.events.next,
      texts: this.texts.save(),
      calls: this.calls.save(),
      running: this.running.save(),
      response: saveResponseFields(this.response),
    };
  }

  /**
   * A builder that carries on a response stored mid-way (its JSON and the sequence number after
   * its last stored event): its items still `in_progress` are open again, to be closed by `terminal()`.
   */
  static resume(response: ResponseObject, nextSequence: number): ResponseBuilder {
    const builder = new ResponseBuilder(response, () => {});
    builder.events.next = nextSequence;
    response.output.forEach((item, index) => {
      if (item.status !== 'in_progress' && item.status !== 'calling') return;
      if (item.type === 'function_call' || item.type === 'mcp_call' || item.type === 'mcp_approval_request')
        builder.calls.reopen(item, index);
      else if (item.type !== 'mcp_list_tools') builder.texts.reopen(item, index);
    });
    return builder;
  }

  /** Emits one event with the next sequence number (the MCP tool loop's own events). */
  emit(body: ResponseEventBody): void {
    this.events.emit(body);
  }

  /** Adds an output item (`response.output_item.added`); returns its output index. */
  addItem<T extends OutputItem>(item: T): number {
    return this.events.addItem(item);
  }

  /**
   * Ends an engine turn of the MCP tool loop: closes its text, reasoning and function calls as
   * completed and returns its tool calls. MCP calls get their `mcp_call_arguments.done` and stay
   * open (`running`) until `mcpCallDone`; a response that ends meanwhile closes them as incomplete.
   */
  endTurn(): TurnCall[] {
    return this.calls.endTurn();
  }

  /** Tracks an MCP call the loop made outside a turn (an approved call), until `mcpCallDone`. */
  trackMcpCall(item: McpCallItem, index: number): void {
    this.running.track(item, index);
  }

  /** An MCP call ended: `response.mcp_call.completed` (or `.failed`), then its `output_item.done`. */
  mcpCallDone(itemId: string, result: { output?: string | undefined; error?: string | undefined }): void {
    this.running.done(itemId, result);
  }
}
