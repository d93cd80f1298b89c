import type { SluiceError } from '../errors/base.js';
import type { ParsedChunk, Usage } from '../streams/chat-stream-tracker.js';
import { streamErrorBody } from './errors.js';
import { newMessageId, newToolUseId } from './ids.js';
import { toStopReason } from './stop-reason.js';
import { THINKING_SIGNATURE } from './types.js';

/** Receives each event as one SSE block (`event: <type>\ndata: <json>\n\n`), in order. */
export type MessageEventSink = (block: string) => void;

interface ToolCallDelta {
  index?: unknown;
  id?: unknown;
  function?: { name?: unknown; arguments?: unknown };
}

interface ChoiceLike {
  delta?: { content?: unknown; reasoning_content?: unknown; reasoning?: unknown; tool_calls?: unknown };
  finish_reason?: unknown;
  /** vLLM: the stop string (or token id) that ended generation. */
  stop_reason?: unknown;
}

type OpenBlock =
  | { kind: 'text' | 'thinking'; index: number }
  | { kind: 'tool_use'; index: number; call: number };

export function sseBlock(type: string, data: unknown): string {
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}

export const PING_BLOCK = sseBlock('ping', { type: 'ping' });

/**
 * Turns the chunks of one chat-completions stream into Anthropic's event sequence:
 * `message_start`, `ping`, then per content block `content_block_start`,
 * `content_block_delta`… (`thinking_delta` and a `signature_delta`, `text_delta`,
 * `input_json_delta`), `content_block_stop`, and at the end `message_delta` (stop reason and
 * usage) and `message_stop`. Blocks come one after another: reasoning, text and each tool call
 * open their own, closing the one before. `fail` closes the open block and ends with an `error`
 * event instead: never a `message_stop`, never a made-up stop reason.
 */
export class MessageStreamBuilder {
  readonly id = newMessageId();
  private open: OpenBlock | undefined;
  private nextIndex = 0;
  /** Engine tool-call index → whether its block was opened (a late fragment of a closed one is dropped). */
  private readonly calls = new Set<number>();
  private finishReason: string | undefined;
  private engineStopReason: unknown;
  private ended = false;

  constructor(
    private readonly model: string,
    private readonly stopSequences: readonly string[] | undefined,
    private readonly sink: MessageEventSink,
  ) {}

  get isEnded(): boolean {
    return this.ended;
  }

  start(): void {
    this.sink(
      sseBlock('message_start', {
        type: 'message_start',
        message: {
          id: this.id,
          type: 'message',
          role: 'assistant',
          model: this.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          // The engine reports usage at the end: the final message_delta carries both counts.
          usage: { input_tokens: 0, output_tokens: 0 },
        },
      }),
    );
    this.sink(PING_BLOCK);
  }

  chunk(chunk: ParsedChunk): void {
    if (this.ended) return;
    const choice = chunk.choices?.[0] as ChoiceLike | undefined;
    if (!choice) return;
    const delta = choice.delta;
    if (delta) {
      const reasoning = delta.reasoning_content ?? delta.reasoning;
      if (typeof reasoning === 'string' && reasoning.length > 0) this.thinkingDelta(reasoning);
      if (typeof delta.content === 'string' && delta.content.length > 0) this.textDelta(delta.content);
      if (Array.isArray(delta.tool_calls))
        for (const call of delta.tool_calls as ToolCallDelta[]) this.toolCallDelta(call);
    }
    if (typeof choice.finish_reason === 'string') {
      this.finishReason = choice.finish_reason;
      this.engineStopReason = choice.stop_reason;
    }
  }

  /** The engine finished: the open block closes, then `message_delta` and `message_stop`. */
  finish(finishReason: string | undefined, usage: Usage | undefined): void {
    if (this.ended) return;
    this.ended = true;
    this.closeOpen();
    const stop = toStopReason(finishReason ?? this.finishReason, this.engineStopReason, this.stopSequences);
    this.sink(
      sseBlock('message_delta', {
        type: 'message_delta',
        delta: stop,
        usage: {
          ...(usage ? { input_tokens: usage.prompt_tokens } : {}),
          output_tokens: usage?.completion_tokens ?? 0,
        },
      }),
    );
    this.sink(sseBlock('message_stop', { type: 'message_stop' }));
  }

  /** The stream failed after its first byte: the open block closes, then one `error` event. */
  fail(error: SluiceError): void {
    if (this.ended) return;
    this.ended = true;
    this.closeOpen();
    this.sink(sseBlock('error', streamErrorBody(error)));
  }

  private thinkingDelta(text: string): void {
    if (this.open?.kind !== 'thinking')
      this.openBlock({ kind: 'thinking' }, { type: 'thinking', thinking: '', signature: '' });
    this.delta({ type: 'thinking_delta', thinking: text });
  }

  private textDelta(text: string): void {
    if (this.open?.kind !== 'text') this.openBlock({ kind: 'text' }, { type: 'text', text: '' });
    this.delta({ type: 'text_delta', text });
  }

  private toolCallDelta(call: ToolCallDelta): void {
    const key = typeof call.index === 'number' ? call.index : 0;
    const open = this.open;
    if (!(open?.kind === 'tool_use' && open.call === key)) {
      // A fragment of a call whose block is already closed cannot be shown any more.
      if (this.calls.has(key)) return;
      this.calls.add(key);
      this.openBlock(
        { kind: 'tool_use', call: key },
        {
          type: 'tool_use',
          id: newToolUseId(),
          name: typeof call.function?.name === 'string' ? call.function.name : '',
          input: {},
        },
      );
    }
    const fragment = call.function?.arguments;
    if (typeof fragment === 'string' && fragment.length > 0)
      this.delta({ type: 'input_json_delta', partial_json: fragment });
  }

  private openBlock(
    block: { kind: 'text' | 'thinking' } | { kind: 'tool_use'; call: number },
    contentBlock: Record<string, unknown>,
  ): void {
    this.closeOpen();
    const index = this.nextIndex++;
    this.open = { ...block, index } as OpenBlock;
    this.sink(
      sseBlock('content_block_start', { type: 'content_block_start', index, content_block: contentBlock }),
    );
  }

  private delta(delta: Record<string, unknown>): void {
    this.sink(
      sseBlock('content_block_delta', { type: 'content_block_delta', index: this.open!.index, delta }),
    );
  }

  private closeOpen(): void {
    const open = this.open;
    if (!open) return;
    this.open = undefined;
    if (open.kind === 'thinking') {
      this.sink(
        sseBlock('content_block_delta', {
          type: 'content_block_delta',
          index: open.index,
          delta: { type: 'signature_delta', signature: THINKING_SIGNATURE },
        }),
      );
    }
    this.sink(sseBlock('content_block_stop', { type: 'content_block_stop', index: open.index }));
  }
}
