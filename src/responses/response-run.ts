import type { ResumableStream } from '../dispatch/resumable-stream.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { StreamError } from '../errors/stream-errors.js';
import { GatewayMemoryFull, UpstreamBodyTooLarge } from '../errors/upstream-limit-errors.js';
import type { Hold } from '../memory/held-bytes.js';
import { ResponseBuilder, type TerminalKind } from './response-builder.js';
import type { ResponseObject } from './types.js';

/** Where the events of a run go as they happen: an SSE client, a background subscriber. */
export interface EventWriter {
  /** Returns false when the writer is full; `onDrain` is then called once it has room. */
  write(json: string, type: string): boolean;
  onDrain(resume: () => void): void;
}

export type RunEnd = TerminalKind & { error?: StreamError | ClientDisconnected };

/** The bound of what a run holds (`limits.maxBodyBytes`), and the request id its error names. */
export interface RunLimit {
  bytes: number;
  requestId: string;
  /** The run's account with the gateway's budget of what all requests hold (`limits.maxHeldBytes`). */
  hold?: Hold | undefined;
}

/**
 * How many copies of each character of its content a run holds at its end: the builder's own
 * text, the done events of its item (`output_text.done`, `content_part.done`, `output_item.done`),
 * the final response's JSON and the terminal event around it.
 */
const CONTENT_COPIES = 6;

/**
 * One response being generated: the builder of its event ladder, the events kept for storage
 * and replay, and the writers that see them live (a writer that is full pauses the engine).
 * What it holds is bounded, counting what its closing will add: past `limit.bytes` of events and
 * of the copies of its content that its closing events and final response will make, the engine
 * request is aborted and the run fails with `upstream_body_too_large`, streamed or not, with what
 * was built until then (stored as shown). So its events, closed, stay within about `limit.bytes`.
 * The same count is the run's account with the gateway's budget (`limit.hold`): when that is
 * full, the run fails the same way with `gateway_memory_full`.
 */
export class ResponseRun {
  readonly builder: ResponseBuilder;
  readonly events: string[] = [];
  private readonly writers = new Set<EventWriter>();
  private stream: ResumableStream | undefined;
  private cancelled = false;
  /** Aborted (reason `cancelled` or `abandoned`) when the run is cancelled or its client goes away. */
  private readonly halt = new AbortController();
  private settle: ((end: RunEnd) => void) | undefined;
  /** Characters of the events kept so far (a run that is not stored keeps none). */
  private held = 0;
  private overflowed = false;

  constructor(
    response: ResponseObject,
    private readonly keepEvents: boolean,
    private readonly limit?: RunLimit,
  ) {
    this.builder = new ResponseBuilder(response, (json, type) => this.publish(json, type));
  }

  get haltSignal(): AbortSignal {
    return this.halt.signal;
  }

  get response(): ResponseObject {
    return this.builder.response;
  }

  addWriter(writer: EventWriter): void {
    this.writers.add(writer);
  }

  removeWriter(writer: EventWriter): void {
    this.writers.delete(writer);
  }

  /** Publishes an already-built event (the terminal one) to storage's list and every writer. */
  publish(json: string, type: string): void {
    if (this.keepEvents) {
      this.held += json.length;
      this.events.push(json);
    }
    for (const writer of this.writers) {
      const stream = this.stream;
      if (!writer.write(json, type) && stream) {
        stream.pause();
        writer.onDrain(() => stream.resume());
      }
    }
    const limit = this.limit;
    if (!limit || this.overflowed || !this.settle) return;
    // Nothing more is read past a bound: the stream ends as failed, and the closing events and
    // terminal come after.
    const projected = this.held + CONTENT_COPIES * this.builder.contentChars;
    if (projected > limit.bytes) {
      this.overflowed = true;
      this.stream?.fail(new UpstreamBodyTooLarge(limit.requestId, limit.bytes));
    } else if (limit.hold && !limit.hold.set(projected)) {
      this.overflowed = true;
      this.stream?.fail(new GatewayMemoryFull(limit.requestId, projected));
    }
  }

  /** The run is over and stored: what it held goes back to the gateway's budget. */
  release(): void {
    this.limit?.hold?.release();
  }

  /** Feeds the engine stream into the builder until it ends; resolves how it ended. */
  follow(stream: ResumableStream): Promise<RunEnd> {
    this.stream = stream;
    return new Promise<RunEnd>((resolve) => {
      this.settle = resolve;
      stream.attach({
        onEvents: (_raw, chunks) => {
          for (const chunk of chunks) {
            if (this.overflowed) return;
            this.builder.chunk(chunk);
          }
        },
        onComplete: () => this.finish({ kind: 'finished', finishReason: stream.finishReason }),
        onFail: (error) => {
          if (this.cancelled) this.finish({ kind: 'cancelled' });
          else this.finish({ kind: 'failed', code: error.code, message: error.message, error });
        },
      });
    });
  }

  /** Cancels the run (background cancel): aborts the engine request. */
  cancel(): void {
    this.cancelled = true;
    this.halt.abort('cancelled');
    this.stream?.abandon(new ClientDisconnected());
    this.finish({ kind: 'cancelled' });
  }

  /** The client of a foreground run went away: abort the engine request at once. */
  abandon(): void {
    if (!this.halt.signal.aborted) this.halt.abort('abandoned');
    if (!this.stream) return;
    const error = new ClientDisconnected();
    this.stream.abandon(error);
    this.finish({ kind: 'failed', code: error.code, message: error.message, error });
  }

  private finish(end: RunEnd): void {
    const settle = this.settle;
    this.settle = undefined;
    settle?.(end);
  }
}
