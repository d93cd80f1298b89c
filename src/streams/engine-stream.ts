import type { Readable } from 'node:stream';
import {
  StreamDeadlineExceeded,
  type StreamError,
  StreamIdleTimeout,
  UpstreamReadError,
} from '../errors/stream-errors.js';
import { UpstreamEventTooLarge, UpstreamPreambleTooLarge } from '../errors/upstream-limit-errors.js';
import { ChatStreamTracker, type EventVerdict, type ParsedChunk } from './chat-stream-tracker.js';
import { DEFAULT_MAX_EVENT_BYTES, parseSseText, plainEventData, SseSplitter } from './sse-splitter.js';

export interface EngineStreamSink {
  /**
   * Events that passed inspection, in order: their exact bytes back to back, and the parsed
   * chunks among them. `raw` never ends inside an event.
   */
  onEvents(raw: Buffer, chunks: readonly ParsedChunk[]): void;
  /** Every choice finished. `sawDone` says whether the engine also sent `[DONE]`. */
  onComplete(sawDone: boolean): void;
  /** The stream failed; the upstream request has been aborted. Called at most once, never after onComplete. */
  onFail(error: StreamError): void;
}

export interface EngineStreamOptions {
  requestId: string;
  /** Longest time without progress (a token or a finish; keep-alives do not count). */
  idleMs: number;
  /** Longest time to the first output (`timeouts.firstTokenMs`); `idleMs` when not given. */
  firstTokenMs?: number | undefined;
  /** Bound of one SSE event (default 1 MiB). */
  maxEventBytes?: number | undefined;
  /** Bound of the events read before the first output chunk (default 1 MiB). */
  maxPrefaceBytes?: number | undefined;
  /** Milliseconds left until the request's overall deadline. */
  deadlineMs: number;
  /** The whole deadline, for the error message. */
  totalDeadlineMs: number;
  /** Aborts the upstream HTTP request (frees the engine's slot). */
  abortUpstream: (reason: Error) => void;
  /**
   * Sees the seconds between two reads that carried output events (inter-token latency);
   * flushed when the stream ends.
   */
  gaps?: { observe(seconds: number): void; flush(): void } | undefined;
}

const SOCKET_CLOSED_CODES = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED']);
/** After the terminal event the rest of the body is drained so the connection can be reused, for at most this long. */
const DRAIN_AFTER_DONE_MS = 5_000;
/** How often the bodies being drained are checked against that bound. */
const DRAIN_CHECK_MS = 1_000;

/**
 * The bodies being drained after their terminal event, each with when to give up on it: one
 * timer checks them all (a timer per stream, set and cleared within a tick or two since the
 * engine's end follows its `[DONE]` at once, cost every stream a timer and a closure).
 */
const draining = new Map<Readable, number>();
let drainCheck: NodeJS.Timeout | undefined;

function ignoreError(): void {}

function forgetDrained(this: Readable): void {
  draining.delete(this);
}

function checkDrains(): void {
  const now = performance.now();
  // A destroyed body closes (and leaves the map) on a later tick.
  for (const [body, until] of draining) if (until <= now) body.destroy();
  if (draining.size === 0) {
    clearInterval(drainCheck);
    drainCheck = undefined;
  }
}

/** Reads the rest of `body` so its connection can be reused, and destroys it past the bound. */
function drainAfterDone(body: Readable): void {
  draining.set(body, performance.now() + DRAIN_AFTER_DONE_MS);
  body.on('close', forgetDrained);
  body.on('error', ignoreError);
  body.resume();
  if (drainCheck === undefined) {
    drainCheck = setInterval(checkDrains, DRAIN_CHECK_MS);
    drainCheck.unref();
  }
}

/**
 * The output stream of one in-flight upstream request: reads the engine's SSE body, splits it
 * into whole events, checks each (terminal detection, error frames, malformed chunks), enforces
 * the idle timeout and the deadline, and reports to a sink. Exactly one of onComplete / onFail
 * ends it. Backpressure: `pause()` stops reading (and the idle clock) until `resume()`.
 */
export class EngineStream {
  readonly tracker: ChatStreamTracker;
  private readonly splitter: SseSplitter;
  private readonly maxPrefaceBytes: number;
  /** Bytes of events read while no chunk carried output yet (role chunks, comments...). */
  private prefaceBytes = 0;
  private sawOutput = false;
  private sink: EngineStreamSink | undefined;
  private ended = false;
  private paused = false;
  /**
   * One timer for both the idle timeout and the deadline, set for the earlier of the two. It is
   * not moved on every progress event (a timer list operation per relayed token): when it fires
   * early it is set again for what is left. (A second timer for the deadline, whose delay differs
   * per request, made node build and drop a timer list for every stream.)
   */
  private clock: NodeJS.Timeout | undefined;
  /** When `clock` fires (`performance.now()` time). */
  private clockAt = 0;
  /** When the overall deadline passes. */
  private deadlineAt = 0;
  /**
   * When the idle clock last started over (`performance.now()`): at the last progress, or when
   * reading started or resumed.
   */
  private idleSince = 0;
  private lastOutputAt = 0;
  /** The state of one read's events, for `inspectEvent` (one callback for every read, not one made per read). */
  private readFailed: StreamError | undefined;
  private readCompleted = false;
  /** End offset (in the read's region) of the last event to forward. */
  private readForwardEnd = 0;
  private readChunks: ParsedChunk[] = [];
  /** A chunk of the read was progress (see isProgress) / carried output (see carriesOutput). */
  private readProgress = false;
  private readOutput = false;
  private readonly inspectEvent = (bytes: Buffer, start: number, end: number) =>
    this.handleEvent(bytes, start, end);
  private readonly onClock = () => this.checkClock();
  private readonly onData = (chunk: Buffer) => this.handleChunk(chunk);
  private readonly onEnd = () => this.handleEnd('eof');
  private readonly onError = (err: Error) => this.handleReadError(err);
  private readonly onClose = () => this.handleEnd('reset');

  constructor(
    private readonly body: Readable,
    private readonly options: EngineStreamOptions,
  ) {
    this.tracker = new ChatStreamTracker(options.requestId);
    this.splitter = new SseSplitter(options.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES);
    this.maxPrefaceBytes = options.maxPrefaceBytes ?? DEFAULT_MAX_EVENT_BYTES;
  }

  /** The silence the stream may keep now: to its first output, then between two outputs. */
  private get idleBound(): number {
    return this.sawOutput ? this.options.idleMs : (this.options.firstTokenMs ?? this.options.idleMs);
  }

  get isEnded(): boolean {
    return this.ended;
  }

  start(sink: EngineStreamSink): void {
    this.sink = sink;
    this.body.on('data', this.onData);
    this.body.on('end', this.onEnd);
    this.body.on('error', this.onError);
    this.body.on('close', this.onClose);
    const now = performance.now();
    this.idleSince = now;
    this.deadlineAt = now + Math.max(1, this.options.deadlineMs);
    this.setClock(now);
  }

  /** Hands the stream to another sink (after the dispatcher's first-event probe). */
  setSink(sink: EngineStreamSink): void {
    this.sink = sink;
  }

  pause(): void {
    if (this.ended || this.paused) return;
    this.paused = true;
    this.body.pause();
    // A slow client is not a stalled engine: the idle clock stops while we hold the engine back
    // (the timer, when it fires, is set again for the deadline alone).
  }

  resume(): void {
    if (this.ended || !this.paused) return;
    this.paused = false;
    const now = performance.now();
    this.idleSince = now;
    // Paused, the clock was (or will be) set for the deadline: the idle timeout comes first again.
    if (this.clockAt > now + this.idleBound) {
      clearTimeout(this.clock);
      this.setClock(now);
    }
    this.body.resume();
  }

  /** Ends the stream from outside (client gone, shutdown): aborts upstream, reports `error` unless silent. */
  abort(error: Error, notify: false): void;
  abort(error: StreamError, notify: true): void;
  abort(error: Error, notify: boolean): void {
    if (this.ended) return;
    this.finish();
    this.options.abortUpstream(error);
    if (notify) this.sink?.onFail(error as StreamError);
  }

  private handleChunk(chunk: Buffer): void {
    if (this.ended) return;
    this.readFailed = undefined;
    this.readCompleted = false;
    this.readForwardEnd = 0;
    this.readProgress = false;
    this.readOutput = false;
    const chunks: ParsedChunk[] = [];
    this.readChunks = chunks;
    const region = this.splitter.push(chunk, this.inspectEvent);
    let failed = this.readFailed as StreamError | undefined;
    let forwardEnd = this.readForwardEnd;
    if (!failed && this.splitter.overflowed) {
      failed = new UpstreamEventTooLarge(this.options.requestId, this.splitter.maxEventBytes);
    }
    // Only progress restarts the idle clock: an engine sending keep-alives alone is stalled.
    if (this.readProgress) {
      const now = performance.now();
      this.idleSince = now;
      const gaps = this.options.gaps;
      if (gaps) {
        if (this.lastOutputAt > 0) gaps.observe((now - this.lastOutputAt) / 1000);
        this.lastOutputAt = now;
      }
    }
    if (!this.sawOutput) {
      if (this.readOutput) this.sawOutput = true;
      else {
        this.prefaceBytes += forwardEnd;
        if (!failed && this.prefaceBytes > this.maxPrefaceBytes) {
          failed = new UpstreamPreambleTooLarge(this.options.requestId, this.maxPrefaceBytes);
          forwardEnd = 0;
        }
      }
    }
    if (forwardEnd > 0 && this.sink) {
      // The events of one read are contiguous from the region's start: forward them in one
      // write, up to the failure or to `[DONE]` (anything an engine sends after it is dropped).
      this.sink.onEvents(forwardEnd === region.length ? region : region.subarray(0, forwardEnd), chunks);
      // The sink may have ended the stream (a client gone, a bound of what it holds passed).
      if (this.ended) return;
    }
    if (failed) this.fail(failed);
    else if (this.readCompleted) this.complete(true);
  }

  /** One whole event of the current read, `bytes[start, end)` (see handleChunk). */
  private handleEvent(bytes: Buffer, start: number, end: number): void {
    if (this.readFailed || this.readCompleted) return;
    const plain = plainEventData(bytes, start, end);
    let verdict: EventVerdict;
    if (plain !== undefined) verdict = this.tracker.inspect(undefined, plain);
    else {
      const fields = parseSseText(bytes.toString('utf8', start, end));
      verdict = this.tracker.inspect(fields.event, fields.data);
    }
    if (verdict.kind === 'error') {
      this.readFailed = verdict.error;
      return;
    }
    if (verdict.kind === 'chunk') {
      this.readChunks.push(verdict.chunk);
      // Output is progress: a usage or role chunk alone is not (see carriesOutput).
      if (verdict.progress) this.readProgress = this.readOutput = true;
    } else if (verdict.kind === 'done') this.readCompleted = true;
    // The read's region starts at its first event: an event's end is where the forward ends.
    this.readForwardEnd = end;
  }

  /** Sets the clock for the deadline or, unless paused, the idle timeout, whichever comes first. */
  private setClock(now: number): void {
    const at = this.paused ? this.deadlineAt : Math.min(this.deadlineAt, this.idleSince + this.idleBound);
    this.clockAt = at;
    this.clock = setTimeout(this.onClock, Math.max(1, at - now));
  }

  /** The clock fired: the deadline passed, the stream is stalled, or progress came since it was set. */
  private checkClock(): void {
    if (this.ended) return;
    const now = performance.now();
    if (now >= this.deadlineAt) this.timeout('deadline');
    else if (!this.paused && now - this.idleSince >= this.idleBound) this.timeout('idle');
    else this.setClock(now);
  }

  private handleEnd(how: 'eof' | 'reset'): void {
    if (this.ended) return;
    const error = this.tracker.endError(how);
    if (error) this.fail(error);
    else this.complete(this.tracker.sawDone);
  }

  private handleReadError(err: Error): void {
    if (this.ended) return;
    const code = (err as { code?: string }).code;
    if (code !== undefined && SOCKET_CLOSED_CODES.has(code)) this.handleEnd('reset');
    else this.fail(new UpstreamReadError(this.options.requestId, err.message));
  }

  private timeout(kind: 'idle' | 'deadline'): void {
    if (this.ended) return;
    const error =
      kind === 'idle'
        ? new StreamIdleTimeout(this.options.requestId, this.idleBound)
        : new StreamDeadlineExceeded(this.options.requestId, this.options.totalDeadlineMs);
    this.fail(error);
  }

  private complete(sawDone: boolean): void {
    this.finish();
    // Drain what is left so the connection goes back to the pool; give up after a bound.
    if (!this.body.readableEnded && !this.body.destroyed) drainAfterDone(this.body);
    this.sink?.onComplete(sawDone);
  }

  private fail(error: StreamError): void {
    this.finish();
    this.options.abortUpstream(error);
    this.sink?.onFail(error);
  }

  private finish(): void {
    this.ended = true;
    this.options.gaps?.flush();
    clearTimeout(this.clock);
    this.body.off('data', this.onData);
    this.body.off('end', this.onEnd);
    this.body.off('close', this.onClose);
    // Keep an error listener so a late socket error is not an unhandled 'error' event.
    this.body.off('error', this.onError);
    this.body.on('error', ignoreError);
  }
}
