import type { ServerResponse } from 'node:http';
import type { ResumableStream } from '../dispatch/resumable-stream.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { StreamError } from '../errors/stream-errors.js';
import type { ParsedChunk, Usage } from '../streams/chat-stream-tracker.js';
import type { EngineStreamSink } from '../streams/engine-stream.js';
import { drainWaiter } from './drain-waiter.js';
import { headerText, writeHead } from './response-head.js';

export type StreamOutcome =
  | { kind: 'completed'; usage: Usage | undefined; finishReason: string | undefined }
  | { kind: 'failed'; error: StreamError; usage: Usage | undefined }
  | { kind: 'client_gone'; usage: Usage | undefined };

/** What a stream's bytes are for its client: nothing to write is `undefined`. */
type Bytes = string | Buffer | undefined;

/**
 * How a front writes an engine stream in its API's shape (chat's chunks as they came, Anthropic's
 * events, ...). The relay calls it; everything else about a stream (backpressure, the client
 * leaving, the one terminal write) is the relay's.
 */
export interface StreamEncoder {
  /** Response headers besides the SSE ones and the request id. */
  readonly headers?: Readonly<Record<string, string>> | undefined;
  /** A keep-alive frame, written after `ms` without a write (Anthropic's `ping`). */
  readonly keepAlive?: { readonly ms: number; readonly frame: string } | undefined;
  /** What is written before any event (Anthropic's `message_start`). */
  start(): Bytes;
  /** What one read of the engine stream becomes. */
  events(raw: Buffer, chunks: readonly ParsedChunk[]): Bytes;
  /** The end of a stream that completed (`sawDone`: the engine's own `[DONE]` was in the last read). */
  complete(sawDone: boolean, finishReason: string | undefined, usage: Usage | undefined): Bytes;
  /** The end of a stream that failed after its first byte: its one typed terminal. */
  fail(error: StreamError): Bytes;
}

export interface RelayOptions {
  requestId: string;
  /** Aborted when the client went away (perhaps before this relay took the stream over). */
  clientGone: AbortSignal;
  /** Called once, when the first bytes are written to the client. */
  onFirstWrite?: () => void;
  /**
   * Called once the relay has the response (its head written, or its client gone), before
   * anything else: the route gives the response up to it (a reply's `hijack`). A head node:http
   * refuses is not taken over: the route's error answer has the response.
   */
  takeOver?: () => void;
}

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
} as const;

/**
 * Relays an engine stream to its HTTP client in the shape `encoder` gives it: a slow client
 * pauses the engine stream (no unbounded buffering), a client that goes away aborts the upstream
 * request at once, and a failure after the first byte ends the stream with the encoder's one
 * terminal error. Every streaming front's SSE goes through here. A head node:http refuses (it
 * cannot happen with headerText's values) frees the engine and rejects with node's error,
 * nothing written: the caller answers it as any error before the first byte.
 */
export function relayStream(
  res: ServerResponse,
  stream: ResumableStream,
  encoder: StreamEncoder,
  options: RelayOptions,
): Promise<StreamOutcome> {
  return new Promise<StreamOutcome>((resolve, reject) =>
    new StreamRelay(res, stream, encoder, options, resolve, reject).start(),
  );
}

/**
 * One relay: the stream's sink and the response's listener in one object (a stream opened per
 * request made a closure for each of its callbacks).
 */
class StreamRelay implements EngineStreamSink {
  private settled = false;
  private waitForDrain: ((resume: () => void) => void) | undefined;
  private keepAlive: NodeJS.Timeout | undefined;
  private wroteSinceKeepAlive = true;
  private readonly onClose = () => {
    if (this.settled || this.res.writableFinished) return;
    this.stream.abandon(new ClientDisconnected());
    this.settle({ kind: 'client_gone', usage: this.stream.usage });
  };
  private readonly onDrain = () => this.stream.resume();

  constructor(
    private readonly res: ServerResponse,
    private readonly stream: ResumableStream,
    private readonly encoder: StreamEncoder,
    private readonly options: RelayOptions,
    private readonly resolve: (outcome: StreamOutcome) => void,
    private readonly reject: (err: Error) => void,
  ) {}

  start(): void {
    const { res, options, encoder } = this;
    res.on('close', this.onClose);
    // The client may have gone between the stream opening and this relay taking it over.
    if (res.destroyed || options.clientGone.aborted) {
      options.takeOver?.();
      this.onClose();
      return;
    }
    const headers: Record<string, string> = {
      'content-type': SSE_HEADERS['content-type'],
      'cache-control': SSE_HEADERS['cache-control'],
      'x-accel-buffering': SSE_HEADERS['x-accel-buffering'],
      'x-request-id': options.requestId,
    };
    if (encoder.headers) Object.assign(headers, encoder.headers);
    const shown = this.stream.clientWorker;
    if (shown !== undefined) headers['x-sluice-worker'] = headerText(shown);
    // The model that answers: another than the one asked for when it fell back.
    headers['x-sluice-model'] = headerText(this.stream.models[0]!);
    const refused = writeHead(res, 200, headers);
    if (refused !== undefined) {
      this.stream.abandon(refused);
      res.off('close', this.onClose);
      this.reject(refused);
      return;
    }
    options.takeOver?.();
    const first = encoder.start();
    if (first !== undefined) res.write(first);
    options.onFirstWrite?.();
    const keepAlive = encoder.keepAlive;
    if (keepAlive) {
      this.keepAlive = setInterval(() => {
        if (!this.wroteSinceKeepAlive && !res.destroyed && !res.writableEnded) res.write(keepAlive.frame);
        this.wroteSinceKeepAlive = false;
      }, keepAlive.ms);
      this.keepAlive.unref();
    }
    this.stream.attach(this);
  }

  onEvents(raw: Buffer, chunks: readonly ParsedChunk[]): void {
    const res = this.res;
    if (res.destroyed) {
      this.onClose();
      return;
    }
    const out = this.encoder.events(raw, chunks);
    if (out === undefined) return;
    this.wroteSinceKeepAlive = true;
    if (!res.write(out)) {
      this.stream.pause();
      this.waitForDrain ??= drainWaiter(res);
      this.waitForDrain(this.onDrain);
    }
  }

  onComplete(sawDone: boolean): void {
    const { stream } = this;
    this.res.end(this.encoder.complete(sawDone, stream.finishReason, stream.usage));
    this.settle({ kind: 'completed', usage: stream.usage, finishReason: stream.finishReason });
  }

  onFail(error: StreamError): void {
    this.res.end(this.encoder.fail(error));
    this.settle({ kind: 'failed', error, usage: this.stream.usage });
  }

  private settle(outcome: StreamOutcome): void {
    if (this.settled) return;
    this.settled = true;
    if (this.keepAlive) clearInterval(this.keepAlive);
    this.res.off('close', this.onClose);
    this.resolve(outcome);
  }
}
