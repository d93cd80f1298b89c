import type { ServerResponse } from 'node:http';
import type { ResumableStream } from '../dispatch/resumable-stream.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { StreamError } from '../errors/stream-errors.js';
import type { ParsedChunk, Usage } from '../streams/chat-stream-tracker.js';
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
  return new Promise<StreamOutcome>((resolve) => {
    let settled = false;
    const settle = (outcome: StreamOutcome) => {
      if (settled) return;
      settled = true;
      res.off('close', onClose);
      resolve(outcome);
    };
    const waitForDrain = drainWaiter(res);
    const onDrain = () => stream.resume();
    const onClose = () => {
      if (settled || res.writableFinished) return;
      stream.abandon(new ClientDisconnected());
      settle({ kind: 'client_gone', usage: stream.usage });
    };
    res.on('close', onClose);
    // The client may have gone between the stream opening and this relay taking it over.
    if (res.destroyed || options.clientGone.aborted) {
      onClose();
      return;
    }
    const shown = options.showWorker ? stream.clientWorker : undefined;
    res.writeHead(200, {
      ...SSE_HEADERS,
      'x-request-id': options.requestId,
      ...(shown === undefined ? {} : { 'x-sluice-worker': shown }),
    });
    options.onFirstWrite?.();
    const onChunk = options.onChunk;
    stream.attach({
      onEvents(raw, chunks) {
        if (onChunk) for (const chunk of chunks) onChunk(chunk);
        if (res.destroyed) {
          onClose();
          return;
        }
        if (!res.write(raw)) {
          stream.pause();
          waitForDrain(onDrain);
        }
      },
      onComplete(sawDone) {
        if (sawDone) res.end();
        else res.end(DONE_FRAME);
        settle({ kind: 'completed', usage: stream.usage, finishReason: stream.finishReason });
      },
      onFail(error) {
        res.end(errorFrame(error));
        settle({ kind: 'failed', error, usage: stream.usage });
      },
    });
  });
}
