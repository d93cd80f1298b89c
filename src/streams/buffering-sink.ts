import type { StreamError } from '../errors/stream-errors.js';
import { carriesOutput, type ParsedChunk } from './chat-stream-tracker.js';
import type { EngineStreamSink } from './engine-stream.js';

type Ending = { kind: 'complete'; sawDone: boolean } | { kind: 'fail'; error: StreamError };

/**
 * Holds what an engine stream reports until the stream is handed to its consumer. The
 * dispatcher waits on `whenReady` (the first chunk with output, or the end) before it commits to
 * a worker: a failure before that point can still be retried elsewhere.
 */
export class BufferingSink implements EngineStreamSink {
  private readonly events: Array<{ raw: Buffer; chunks: readonly ParsedChunk[] }> = [];
  private ending: Ending | undefined;
  private target: EngineStreamSink | undefined;
  /** The first output chunk or the end has come. */
  private isReady = false;
  /** Ends the wait of `whenReady`, once. */
  private wake: (() => void) | undefined;
  /** Chunks with output (see carriesOutput) seen before the stream was handed over. */
  outputChunks = 0;

  /**
   * Resolves at the first chunk with output or at the end of the stream, or (the caller checks
   * which) when `signal` aborts, since an abort that ends the stream silently tells no sink.
   */
  whenReady(signal: AbortSignal): Promise<void> {
    if (this.isReady || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.wake = undefined;
        signal.removeEventListener('abort', done);
        resolve();
      };
      this.wake = done;
      signal.addEventListener('abort', done, { once: true });
    });
  }

  private ready(): void {
    this.isReady = true;
    this.wake?.();
  }

  /** The failure that ended the stream before any output chunk, if that is what happened. */
  get earlyFailure(): StreamError | undefined {
    return this.outputChunks === 0 && this.ending?.kind === 'fail' ? this.ending.error : undefined;
  }

  onEvents(raw: Buffer, chunks: readonly ParsedChunk[]): void {
    if (this.target) {
      this.target.onEvents(raw, chunks);
      return;
    }
    this.events.push({ raw, chunks });
    for (const chunk of chunks) if (carriesOutput(chunk)) this.outputChunks++;
    if (this.outputChunks > 0) this.ready();
  }

  onComplete(sawDone: boolean): void {
    if (this.target) {
      this.target.onComplete(sawDone);
      return;
    }
    this.ending = { kind: 'complete', sawDone };
    this.ready();
  }

  onFail(error: StreamError): void {
    if (this.target) {
      this.target.onFail(error);
      return;
    }
    this.ending = { kind: 'fail', error };
    this.ready();
  }

  /** Replays everything held to `target`, then forwards to it directly. */
  attach(target: EngineStreamSink): void {
    for (const { raw, chunks } of this.events.splice(0)) target.onEvents(raw, chunks);
    this.target = target;
    const ending = this.ending;
    if (ending?.kind === 'complete') target.onComplete(ending.sawDone);
    else if (ending?.kind === 'fail') target.onFail(ending.error);
  }
}
