/** The numbered events of a response: `sequence_number`, the sink, the closing events of a draft terminal. */
import type { OutputItem, ResponseEventBody, ResponseObject } from './types.js';

/** Receives each event as JSON text, in order, with its type. */
export type EventSink = (json: string, type: string) => void;

export interface BuiltEvent {
  json: string;
  type: string;
}

/**
 * The numbered events of one response: each gets the next `sequence_number` and goes to the
 * sink, or, while a terminal is being drafted, to that draft's closing events.
 */
export class EventSequence {
  /** The `sequence_number` of the next event. */
  next = 0;
  /** The closing events of a terminal being drafted. */
  private pending: BuiltEvent[] | undefined;

  constructor(
    readonly response: ResponseObject,
    private readonly sink: EventSink,
  ) {}

  /** Emits one event with the next sequence number. */
  emit(body: ResponseEventBody): void {
    const { type, ...fields } = body;
    this.send(JSON.stringify({ type, sequence_number: this.next++, ...fields }), type);
  }

  /** Emits an event carrying the whole response object (`response.created` and the like). */
  emitResponse(type: string): void {
    this.send(
      `{"type":"${type}","sequence_number":${this.next++},"response":${JSON.stringify(this.response)}}`,
      type,
    );
  }

  /** Adds an output item (`response.output_item.added`); returns its output index. */
  addItem<T extends OutputItem>(item: T): number {
    const index = this.response.output.length;
    this.response.output.push(item);
    // Serialised at once: the event shows the item as it starts, before any content.
    this.emit({ type: 'response.output_item.added', output_index: index, item });
    return index;
  }

  /** From now on the events are held as the closing events of a terminal draft, not sent. */
  holdClosing(): void {
    this.pending = [];
  }

  /** Stops holding; returns the closing events held since `holdClosing()`. */
  takeClosing(): BuiltEvent[] {
    const closing = this.pending ?? [];
    this.pending = undefined;
    return closing;
  }

  /** To the sink, or, while a terminal is drafted, to its closing events. */
  private send(json: string, type: string): void {
    if (this.pending) this.pending.push({ json, type });
    else this.sink(json, type);
  }
}
