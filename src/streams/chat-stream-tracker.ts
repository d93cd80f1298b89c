import {
  EngineFinishFailure,
  MalformedChunk,
  NORMAL_FINISH_REASONS,
  RequestStreamClosed,
  type StreamError,
  type UpstreamErrorFrame,
} from '../errors/stream-errors.js';
import { errorEventFrom, errorFrameFrom } from './error-frame.js';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  [extra: string]: unknown;
}

interface ChunkChoice {
  index?: unknown;
  finish_reason?: unknown;
  delta?: { content?: unknown; reasoning_content?: unknown; reasoning?: unknown; tool_calls?: unknown };
  text?: unknown;
}

export interface ParsedChunk {
  choices?: ChunkChoice[];
  usage?: Usage | null;
  [key: string]: unknown;
}

/**
 * Whether a chunk carries output: text, reasoning, a tool call or a finish. Neither the opening
 * role-only chunk that engines send before prefill nor a usage-only chunk (`choices: []` with
 * `usage`) does: they prove nothing about generation, and a stream that fails after them has
 * shown the client nothing of its answer yet, so it is retried like one that sent nothing.
 */
export function carriesOutput(chunk: ParsedChunk): boolean {
  return isProgress(chunk);
}

/**
 * Whether a chunk is progress of generation, the only thing that resets the idle timer: a
 * token of text, reasoning or a tool call, or a finish. Keep-alives are not (SSE comments,
 * `choices: []`, role-only chunks, a usage chunk repeated): an engine that sends only those is
 * stalled, whatever it writes.
 */
export function isProgress(chunk: ParsedChunk): boolean {
  const choices = chunk.choices;
  if (!Array.isArray(choices)) return false;
  for (const choice of choices) {
    if (typeof choice !== 'object' || choice === null) continue;
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) return true;
    if (choiceHasOutput(choice)) return true;
  }
  return false;
}

/** Whether a choice carries a token of text, reasoning or a tool call (its finish aside). */
function choiceHasOutput(choice: ChunkChoice): boolean {
  if (typeof choice.text === 'string' && choice.text.length > 0) return true;
  const delta = choice.delta;
  if (!delta) return false;
  if (typeof delta.content === 'string' && delta.content.length > 0) return true;
  if (typeof delta.reasoning_content === 'string' && delta.reasoning_content.length > 0) return true;
  if (typeof delta.reasoning === 'string' && delta.reasoning.length > 0) return true;
  return Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0;
}

export type EventVerdict =
  /** `progress`: the chunk is progress of generation (isProgress), found in the same pass. */
  | { kind: 'chunk'; chunk: ParsedChunk; progress: boolean }
  | { kind: 'done' }
  | { kind: 'other' } /* comments, keep-alives, events we pass through untouched */
  | { kind: 'error'; error: StreamError };

/**
 * Follows one chat-completions or completions stream event by event and decides when it is
 * complete: every choice that appeared has sent a `finish_reason`. Anything else that ends
 * the stream (EOF, reset, a `[DONE]` too early) is a RequestStreamClosed, never a success.
 */
export class ChatStreamTracker {
  private readonly seen = new Set<number>();
  private readonly finished = new Set<number>();
  /** The choice index added to `seen` last: a stream of one choice adds it once, not per chunk. */
  private lastSeen: number | undefined;
  usage: Usage | undefined;
  sawDone = false;
  events = 0;
  /** The finish_reason of choice 0 (or the first one that finished). */
  finishReason: string | undefined;

  constructor(readonly requestId: string) {}

  /** True once every choice seen so far has finished. */
  get complete(): boolean {
    return this.seen.size > 0 && this.finished.size === this.seen.size;
  }

  /** Inspects one event: its `event:` field (undefined for the default) and its data (undefined for none). */
  inspect(event: string | undefined, data: string | undefined): EventVerdict {
    this.events++;
    if (event === 'error') return { kind: 'error', error: errorEventFrom(data) };
    if (data === undefined) return { kind: 'other' };
    if (data === '[DONE]') {
      this.sawDone = true;
      if (!this.complete) return { kind: 'error', error: new RequestStreamClosed(this.requestId, 'done') };
      return { kind: 'done' };
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch (err) {
      return { kind: 'error', error: new MalformedChunk(this.requestId, (err as Error).message) };
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      return { kind: 'error', error: new MalformedChunk(this.requestId, 'a chunk is not a JSON object') };
    }
    const frame: UpstreamErrorFrame | undefined = errorFrameFrom(parsed);
    if (frame) return { kind: 'error', error: frame };
    const chunk = parsed as ParsedChunk;
    const choices = chunk.choices;
    let progress = false;
    if (choices !== undefined) {
      if (!Array.isArray(choices)) {
        return { kind: 'error', error: new MalformedChunk(this.requestId, '`choices` is not an array') };
      }
      for (const choice of choices) {
        if (typeof choice !== 'object' || choice === null || Array.isArray(choice)) {
          return { kind: 'error', error: new MalformedChunk(this.requestId, 'a choice is not an object') };
        }
        const index = typeof choice.index === 'number' ? choice.index : 0;
        if (index !== this.lastSeen) {
          this.seen.add(index);
          this.lastSeen = index;
        }
        const reason = choice.finish_reason;
        if (reason === null || reason === undefined) {
          if (!progress) progress = choiceHasOutput(choice);
        } else {
          // An abort, an error or no finish reason at all is never relayed as an ending.
          if (typeof reason !== 'string' || !NORMAL_FINISH_REASONS.has(reason)) {
            return { kind: 'error', error: new EngineFinishFailure(this.requestId, reason) };
          }
          this.finished.add(index);
          if (this.finishReason === undefined) this.finishReason = reason;
          progress = true;
        }
      }
    }
    if (chunk.usage) this.usage = chunk.usage;
    return { kind: 'chunk', chunk, progress };
  }

  /** The error for a stream that ended now, or undefined when it had finished. */
  endError(how: 'eof' | 'reset'): StreamError | undefined {
    return this.complete ? undefined : new RequestStreamClosed(this.requestId, how);
  }
}
