import { outcomeOf } from '../dispatch/classify-upstream-error.js';
import type { OpenedStream } from '../dispatch/dispatcher.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { StreamError } from '../errors/stream-errors.js';
import { ResponseBuilder, type TerminalKind } from './response-builder.js';
import type { ResponseObject } from './types.js';

/** Where the events of a run go as they happen: an SSE client, a background subscriber. */
export interface EventWriter {
  /** Returns false when the writer is full; `onDrain` is then called once it has room. */
  write(json: string, type: string): boolean;
  onDrain(resume: () => void): void;
}

export type RunEnd = TerminalKind & { error?: StreamError | ClientDisconnected };

/**
 * One response being generated: the builder of its event ladder, the events kept for storage
 * and replay, and the writers that see them live (a writer that is full pauses the engine).
 */
export class ResponseRun {
  readonly builder: ResponseBuilder;
  readonly events: string[] = [];
  private readonly writers = new Set<EventWriter>();
  private opened: OpenedStream | undefined;
  private cancelled = false;
  private settle: ((end: RunEnd) => void) | undefined;

  constructor(
    response: ResponseObject,
    private readonly keepEvents: boolean,
  ) {
    this.builder = new ResponseBuilder(response, (json, type) => this.publish(json, type));
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
    if (this.keepEvents) this.events.push(json);
    for (const writer of this.writers) {
      if (!writer.write(json, type) && this.opened) {
        const { stream } = this.opened;
        stream.pause();
        writer.onDrain(() => stream.resume());
      }
    }
  }

  /** Feeds the engine stream into the builder until it ends; resolves how it ended. */
  follow(opened: OpenedStream): Promise<RunEnd> {
    this.opened = opened;
    return new Promise<RunEnd>((resolve) => {
      this.settle = resolve;
      opened.sink.attach({
        onEvents: (_raw, chunks) => {
          for (const chunk of chunks) this.builder.chunk(chunk);
        },
        onComplete: () => {
          opened.attempt.release('success');
          this.finish({ kind: 'finished', finishReason: opened.stream.tracker.finishReason });
        },
        onFail: (error) => {
          opened.attempt.release(outcomeOf(error));
          if (this.cancelled) this.finish({ kind: 'cancelled' });
          else this.finish({ kind: 'failed', code: error.code, message: error.message, error });
        },
      });
    });
  }

  /** Cancels the run (background cancel): aborts the engine request. */
  cancel(): void {
    this.cancelled = true;
    this.opened?.stream.abort(new ClientDisconnected(), false);
    this.opened?.attempt.release('neutral');
    this.finish({ kind: 'cancelled' });
  }

  /** The client of a foreground run went away: abort the engine request at once. */
  abandon(): void {
    if (!this.opened || this.opened.stream.isEnded) return;
    const error = new ClientDisconnected();
    this.opened.stream.abort(error, false);
    this.opened.attempt.release('neutral');
    this.finish({ kind: 'failed', code: error.code, message: error.message, error });
  }

  private finish(end: RunEnd): void {
    const settle = this.settle;
    this.settle = undefined;
    settle?.(end);
  }
}
