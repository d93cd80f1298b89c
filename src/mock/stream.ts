import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Clock } from './clock.js';
import type { Faults, Trigger } from './faults.js';
import { type Completion, REASONING_START, TOOL_ARGUMENT_PIECES, tokenJson } from './generate.js';
import type { DocumentCompletion } from './json-document.js';
import {
  type ChunkWriter,
  DONE,
  ERROR_FRAME,
  ERROR_FRAME_STR,
  EVENT_ERROR,
  MALFORMED,
  type Usage,
} from './sse.js';

/** What one request generates, for every choice alike. */
export interface Plan {
  choices: number;
  completion: Completion | DocumentCompletion;
  reasoningTokens: number;
  /** Set when the answer is a tool call; `callIds` has one id per choice. */
  tool: { name: string; callIds: string[]; argumentPieces?: readonly string[] | undefined } | undefined;
  usage: Usage;
  includeUsage: boolean;
}

/** How a worker paces its streams. */
export interface Pacing {
  clock: Clock;
  /** Between token chunks; 0 = one event per setImmediate round. */
  intervalMs: number;
  /** Events gathered into one write (1 = each event is its own write). */
  eventsPerWrite: number;
}

/**
 * What paces a stream instead of the clock: the engine model (engine-run.ts). `tick` is called
 * once for each token the engine computes (the first: the role chunk and the first token), and
 * once more after the last (the finish).
 */
export interface TokenSource {
  attach(tick: () => void): void;
}

/** How a request ended, for the stats. */
export type Ending = 'completed' | 'aborted' | 'cut';

/** The life of one generation request: ends once, whoever ends it first. */
export class Life {
  ended = false;
  constructor(private readonly onEnd: (how: Ending) => void) {}
  end(how: Ending): void {
    if (this.ended) return;
    this.ended = true;
    this.onEnd(how);
  }
}

/** The phases of a stream, in order. */
type Kind = 'role' | 'token' | 'finish' | 'usage' | 'done' | 'end';

/** Ends the response abruptly: what was written is flushed, then the socket is destroyed. */
export function cutConnection(res: ServerResponse): void {
  const socket = res.socket;
  if (!socket || socket.destroyed) return;
  socket.end(() => socket.destroy());
}

/**
 * One streamed response: its events in order (role chunks, token chunks interleaved over the
 * choices, finish chunks, usage, `[DONE]`), paced by the shared clock (one token chunk per
 * interval, the finish one interval after the last; usage and `[DONE]` go out with the finish)
 * or, with no interval, one event per setImmediate round. It honours backpressure and the faults' triggers.
 *
 * Each event is one write: after the headers, the event goes straight to the socket framed as
 * its own HTTP chunk (what `res.write` would send, without its per-write cork, nextTick and
 * four-piece writev), and `res.end()` writes the last chunk as usual. With `eventsPerWrite` k > 1
 * events are gathered k to a write (like vLLM's `--stream-interval`): the same events, fewer
 * syscalls, tokens arriving in bursts of k. Whatever is gathered goes out before a fault fires.
 */
export class MockStream {
  private kind: Kind = 'role';
  /** Position inside the current phase. */
  private step = 0;
  private choice = 0;
  private readonly steps: number;
  private pending: string | undefined;
  private pendingKind: Kind = 'role';
  private tokens = 0;
  private trigger = 0;
  private due = 0;
  /** Ticks of the clock or of the token source not yet used by a token. */
  private ticks = 0;
  /** The token source gave its first tick; the stream began (past any delay_first). */
  private ticked = false;
  private begun = false;
  /** The last event written was a token: the next event waits for a tick. */
  private afterToken = false;
  /** The pending token is choice 0's, the first of its step (one step = one token per choice). */
  private pendingStepStart = false;
  private socket: Socket | undefined;
  private chunked = true;
  private batch = '';
  private batched = 0;
  private readonly clock: Clock;
  private readonly intervalMs: number;
  private readonly eventsPerWrite: number;

  constructor(
    private readonly res: ServerResponse,
    private readonly life: Life,
    pacing: Pacing,
    private readonly writer: ChunkWriter,
    private readonly plan: Plan,
    private readonly faults: Faults,
    private readonly source?: TokenSource,
  ) {
    this.clock = pacing.clock;
    this.intervalMs = pacing.intervalMs;
    this.eventsPerWrite = Math.max(1, Math.floor(pacing.eventsPerWrite));
    const { completion, reasoningTokens, tool } = plan;
    this.steps =
      reasoningTokens + (tool ? 1 + (tool.argumentPieces ?? TOOL_ARGUMENT_PIECES).length : completion.pieces);
    if (writer.api !== 'chat') this.kind = 'token';
  }

  start(): void {
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
    });
    this.res.flushHeaders();
    this.socket = this.res.socket ?? undefined;
    this.chunked = this.res.chunkedEncoding;
    if (this.source) this.source.attach(this.sourceTick);
    else this.open();
  }

  private open(): void {
    if (this.faults.delayFirstMs > 0) this.clock.after(this.faults.delayFirstMs, this.begin);
    else this.begin();
  }

  /** The token source's first tick opens the stream; each later one releases a token (kept until it began). */
  private readonly sourceTick = (): void => {
    if (this.begun) this.run();
    else if (this.ticked) this.ticks++;
    else {
      this.ticked = true;
      this.open();
    }
  };

  /**
   * Timed streams: the first token follows the role chunk at once (delay_first imitates a
   * prefill), each later token and the finish come one interval after the previous token, so N
   * tokens take N intervals (as a non-streaming answer does).
   */
  private readonly begin = (): void => {
    this.begun = true;
    this.due = this.clock.now();
    this.pump();
  };

  private readonly run = (): void => {
    this.ticks++;
    this.pump();
  };

  private readonly resume = (): void => {
    this.pump();
  };

  private pump(): void {
    const timed = this.intervalMs > 0 || this.source !== undefined;
    while (!this.life.ended) {
      if (this.pending === undefined) {
        this.pendingKind = this.kind;
        this.pending = this.next();
      }
      const kind = this.pendingKind;
      if (kind !== 'role') {
        const trigger = this.faults.triggers[this.trigger];
        // At a token, triggers at its position fire; after the last token, any left fire.
        if (trigger && (kind !== 'token' || trigger.n <= this.tokens)) {
          this.trigger++;
          if (this.fire(trigger)) return;
          continue;
        }
      }
      if (timed && this.afterToken && (kind !== 'token' || this.pendingStepStart)) {
        if (this.ticks === 0) {
          this.schedule();
          return;
        }
        this.ticks--;
      }
      const text = this.pending;
      this.pending = undefined;
      this.afterToken = kind === 'token';
      if (this.afterToken) this.tokens++;
      if (kind === 'done' || kind === 'end') {
        this.life.end('completed');
        this.end(this.takeBatch() + text);
        return;
      }
      if (!this.queue(text)) {
        this.socket?.once('drain', this.resume);
        return;
      }
      if (!timed && this.batched === 0) {
        this.clock.soon(this.run);
        return;
      }
    }
  }

  /** The next token is due one interval after the last; a stream more than an interval late skips ahead. */
  private schedule(): void {
    if (this.source) return; // the source ticks
    const now = this.clock.now();
    let due = this.due + this.intervalMs;
    if (due < now - this.intervalMs) due = now;
    this.due = due;
    this.clock.at(due, this.run);
  }

  /** Fires a trigger; true when the stream is over (or stalled). */
  private fire(trigger: Trigger): boolean {
    const { res, life } = this;
    const gathered = this.takeBatch();
    if (gathered) this.write(gathered);
    switch (trigger.kind) {
      case 'reset_after':
      case 'drop_after':
        life.end('cut');
        cutConnection(res);
        return true;
      case 'error_frame_after':
        life.end('completed');
        this.write(ERROR_FRAME);
        this.end(DONE);
        return true;
      case 'error_frame_str_after':
        life.end('completed');
        this.write(ERROR_FRAME_STR);
        this.end(DONE);
        return true;
      case 'event_error_after':
        life.end('completed');
        this.end(EVENT_ERROR);
        return true;
      case 'eof_after':
        life.end('completed');
        this.end('');
        return true;
      case 'stall_after':
        // Nothing more: the request stays in flight until the client goes away (counted aborted).
        return true;
      case 'malformed_after':
        this.write(MALFORMED);
        return false;
    }
  }

  /** Writes an event, or gathers it until `eventsPerWrite` are; false when the socket asks to wait for 'drain'. */
  private queue(text: string): boolean {
    if (this.eventsPerWrite === 1) return this.write(text);
    this.batch += text;
    if (++this.batched < this.eventsPerWrite) return true;
    return this.write(this.takeBatch());
  }

  private takeBatch(): string {
    const text = this.batch;
    this.batch = '';
    this.batched = 0;
    return text;
  }

  /** Writes events as one HTTP chunk; false when the socket asks to wait for 'drain'. */
  private write(text: string): boolean {
    const socket = this.socket;
    if (!socket) return this.res.write(text);
    if (socket.destroyed) return true; // the client is gone; 'close' ends the request
    if (!this.chunked) return socket.write(text);
    return socket.write(`${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`);
  }

  /** Writes the last event, if any, and ends the response in the same flush. */
  private end(text: string): void {
    if (text.length > 0) {
      // res.end() fully uncorks the socket: the event and the last chunk leave in one writev.
      this.socket?.cork();
      this.write(text);
    }
    this.res.end();
  }

  /** The text of the event of kind `this.kind` at the current position; advances the position. */
  private next(): string {
    const { writer, plan } = this;
    switch (this.kind) {
      case 'role': {
        const text = writer.role(this.choice);
        if (++this.choice === plan.choices) this.enter('token');
        return text;
      }
      case 'token': {
        if (this.step >= this.steps) {
          this.enter('finish');
          return this.peekNext();
        }
        const text = this.tokenEvent(this.choice, this.step);
        this.pendingStepStart = this.choice === 0;
        if (++this.choice === plan.choices) {
          this.choice = 0;
          this.step++;
        }
        return text;
      }
      case 'finish': {
        if (this.faults.noFinish) {
          this.enter('usage');
          return this.peekNext();
        }
        const reason = plan.tool ? 'tool_calls' : plan.completion.finishReason;
        const text = writer.finish(this.choice, reason);
        if (++this.choice === plan.choices) this.enter('usage');
        return text;
      }
      case 'usage':
        this.enter('done');
        if (!plan.includeUsage) return this.peekNext();
        return writer.usage(plan.usage);
      case 'done':
        this.enter('end');
        if (this.faults.noDone) return this.peekNext();
        return DONE;
      case 'end':
        return '';
    }
  }

  /** Moves to the next phase when the current one has nothing to emit. */
  private peekNext(): string {
    this.pendingKind = this.kind;
    return this.next();
  }

  private enter(kind: Kind): void {
    this.kind = kind;
    this.step = 0;
    this.choice = 0;
  }

  private tokenEvent(c: number, step: number): string {
    const { writer, plan } = this;
    if (step < plan.reasoningTokens) return writer.reasoning(c, tokenJson(REASONING_START + step));
    const k = step - plan.reasoningTokens;
    if (plan.tool) {
      if (k === 0) return writer.toolCallStart(c, plan.tool.callIds[c]!, plan.tool.name);
      return writer.toolCallArguments(
        c,
        JSON.stringify((plan.tool.argumentPieces ?? TOOL_ARGUMENT_PIECES)[k - 1]!),
      );
    }
    return writer.token(c, plan.completion.pieceJson(k));
  }
}
