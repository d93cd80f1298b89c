import type { StreamError } from '../errors/stream-errors.js';
import { MessageStreamBuilder, PING_BLOCK } from '../messages/stream-builder.js';
import type { StreamEncoder } from '../pipeline/relay.js';
import type { ParsedChunk, Usage } from '../streams/chat-stream-tracker.js';

/** A `ping` is written after this long without an event. */
const PING_MS = 15_000;

/**
 * An engine's chat-completions stream as Anthropic Messages events (see MessageStreamBuilder):
 * what each read becomes, in one write; a failure after the first byte closes the open block
 * and ends with one `error` event.
 */
export class MessagesStreamEncoder implements StreamEncoder {
  readonly headers: Readonly<Record<string, string>>;
  readonly keepAlive: { readonly ms: number; readonly frame: string };
  private pending: string[] = [];
  private readonly builder: MessageStreamBuilder;

  constructor(
    requestId: string,
    model: string,
    stopSequences: readonly string[] | undefined,
    pingMs = PING_MS,
  ) {
    this.headers = { 'request-id': requestId };
    this.keepAlive = { ms: pingMs, frame: PING_BLOCK };
    this.builder = new MessageStreamBuilder(model, stopSequences, (block) => {
      this.pending.push(block);
    });
  }

  start(): string | undefined {
    this.builder.start();
    return this.take();
  }

  events(_raw: Buffer, chunks: readonly ParsedChunk[]): string | undefined {
    for (const chunk of chunks) this.builder.chunk(chunk);
    return this.take();
  }

  complete(
    _sawDone: boolean,
    finishReason: string | undefined,
    usage: Usage | undefined,
  ): string | undefined {
    this.builder.finish(finishReason, usage);
    return this.take();
  }

  fail(error: StreamError): string | undefined {
    this.builder.fail(error);
    return this.take();
  }

  /** What the builder produced since the last write, as one text. */
  private take(): string | undefined {
    const pending = this.pending;
    if (pending.length === 0) return undefined;
    this.pending = [];
    return pending.length === 1 ? pending[0]! : pending.join('');
  }
}
