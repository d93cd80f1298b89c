import type { ServerResponse } from 'node:http';
import type { ResumableStream } from '../dispatch/resumable-stream.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { StreamError } from '../errors/stream-errors.js';
import type { ParsedChunk, Usage } from '../streams/chat-stream-tracker.js';
import type { EngineStreamSink } from '../streams/engine-stream.js';
import { drainWaiter } from './drain-waiter.js';
import { DONE_FRAME, errorFrame } from './sse-frames.js';

export type StreamOutcome =
  | { kind: 'completed'; usage: Usage | undefined; finishReason: string | undefined }
  | { kind: 'failed'; error: StreamError; usage: Usage | undefined }
  | { kind: 'client_gone'; usage: Usage | undefined };

export interface RelayOptions {
  requestId: string;
  /** Aborted when the client went away (perhaps before this relay took the stream over). */
  clientGone: AbortSignal;
  /** Whether the answer names its worker (`X-Sluice-Worker`, its public id). */
  showWorker: boolean;
  /** Called once, when the first bytes are written to the client. */
  onFirstWrite?: () => void;
  /** Sees every parsed chunk relayed (usage accounting, logs). */
  onChunk?: (chunk: ParsedChunk) => void;
}

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
} as const;

/**
 * Relays a chat/completions stream to the client as it arrives, byte for byte (a resumed
 * stream's continuation excepted, see ResumableStream). A slow
 * client pauses the engine stream (no unbounded buffering); a client that goes away aborts the
 * upstream request at once; a failure after the first byte ends the stream with one error frame.
 */
export function relayStream(
  res: ServerResponse,
  stream: ResumableStream,
  options: RelayOptions,
): Promise<StreamOutcome> {
  return new Promise<StreamOutcome>((resolve) => new StreamRelay(res, stream, options, resolve).start());
}

/**
 * One relay: the stream's sink and the response's listener in one object (a stream opened per
 * request made a closure for each of its callbacks).
 */
class StreamRelay implements EngineStreamSink {
  private settled = false;
  private waitForDrain: ((resume: () => void) => void) | undefined;
  private readonly onClose = () => {
    if (this.settled || this.res.writableFinished) return;
    this.stream.abandon(new ClientDisconnected());
    this.settle({ kind: 'client_gone', usage: this.stream.usage });
  };
  private readonly onDrain = () => this.stream.resume();

  constructor(
    private readonly res: ServerResponse,
    private readonly stream: ResumableStream,
    private readonly options: RelayOptions,
    private readonly resolve: (outcome: StreamOutcome) => void,
  ) {}

  start(): void {
    const { res, options } = this;
    res.on('close', this.onClose);
    // The client may have gone between the stream opening and this relay taking it over.
    if (res.destroyed || options.clientGone.aborted) {
      this.onClose();
      return;
    }
    const headers: Record<string, string> = {
      'content-type': SSE_HEADERS['content-type'],
      'cache-control': SSE_HEADERS['cache-control'],
      'x-accel-buffering': SSE_HEADERS['x-accel-buffering'],
      'x-request-id': options.requestId,
    };
    const shown = options.showWorker ? this.stream.clientWorker : undefined;
    if (shown !== undefined) headers['x-sluice-worker'] = shown;
    res.writeHead(200, headers);
    options.onFirstWrite?.();
    this.stream.attach(this);
  }

  onEvents(raw: Buffer, chunks: readonly ParsedChunk[]): void {
    const onChunk = this.options.onChunk;
    if (onChunk) for (const chunk of chunks) onChunk(chunk);
    const res = this.res;
    if (res.destroyed) {
      this.onClose();
      return;
    }
    if (!res.write(raw)) {
      this.stream.pause();
      this.waitForDrain ??= drainWaiter(res);
      this.waitForDrain(this.onDrain);
    }
  }

  onComplete(sawDone: boolean): void {
    if (sawDone) this.res.end();
    else this.res.end(DONE_FRAME);
    this.settle({ kind: 'completed', usage: this.stream.usage, finishReason: this.stream.finishReason });
  }

  onFail(error: StreamError): void {
    this.res.end(errorFrame(error));
    this.settle({ kind: 'failed', error, usage: this.stream.usage });
  }

  private settle(outcome: StreamOutcome): void {
    if (this.settled) return;
    this.settled = true;
    this.res.off('close', this.onClose);
    this.resolve(outcome);
  }
}
