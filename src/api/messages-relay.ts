import type { ServerResponse } from 'node:http';
import type { ResumableStream } from '../dispatch/resumable-stream.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import { MessageStreamBuilder, PING_BLOCK } from '../messages/stream-builder.js';
import { drainWaiter } from './drain-waiter.js';
import { SSE_HEADERS, type StreamOutcome } from './relay-stream.js';

export interface MessagesRelayOptions {
  requestId: string;
  /** The model the client named (echoed in `message_start`). */
  model: string;
  stopSequences: readonly string[] | undefined;
  /** Aborted when the client went away (perhaps before this relay took the stream over). */
  clientGone: AbortSignal;
  /** Called once, when the first bytes are written to the client. */
  onFirstWrite?: () => void;
  /** A `ping` is written after this long without an event (default 15 s). */
  pingMs?: number;
}

const PING_MS = 15_000;

/**
 * Streams an engine's chat-completions stream to the client as Anthropic Messages events (see
 * MessageStreamBuilder). Like relayStream: a slow client pauses the engine, a client that goes
 * away aborts it at once, and a failure after the first byte ends the stream with the open
 * block closed and one `error` event.
 */
export function relayMessages(
  res: ServerResponse,
  stream: ResumableStream,
  options: MessagesRelayOptions,
): Promise<StreamOutcome> {
  return new Promise<StreamOutcome>((resolve) => {
    let settled = false;
    let pinger: NodeJS.Timeout | undefined;
    let wroteSincePing = true;
    const settle = (outcome: StreamOutcome) => {
      if (settled) return;
      settled = true;
      if (pinger) clearInterval(pinger);
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
    if (res.destroyed || options.clientGone.aborted) {
      onClose();
      return;
    }
    res.writeHead(200, {
      ...SSE_HEADERS,
      'x-request-id': options.requestId,
      'request-id': options.requestId,
      ...(stream.clientWorker === undefined ? {} : { 'x-sluice-worker': stream.clientWorker }),
    });
    let pending: string[] = [];
    const builder = new MessageStreamBuilder(options.model, options.stopSequences, (block) => {
      pending.push(block);
    });
    /** Writes what the builder produced, in one write; false when the client is full. */
    const flush = (): boolean => {
      if (pending.length === 0) return true;
      const text = pending.length === 1 ? pending[0]! : pending.join('');
      pending = [];
      wroteSincePing = true;
      return res.write(text);
    };
    const end = () => {
      const text = pending.join('');
      pending = [];
      res.end(text);
    };
    builder.start();
    flush();
    options.onFirstWrite?.();
    const pingMs = options.pingMs ?? PING_MS;
    pinger = setInterval(() => {
      if (!wroteSincePing && !res.destroyed && !res.writableEnded) res.write(PING_BLOCK);
      wroteSincePing = false;
    }, pingMs);
    pinger.unref();
    stream.attach({
      onEvents(_raw, chunks) {
        if (res.destroyed) {
          onClose();
          return;
        }
        for (const chunk of chunks) builder.chunk(chunk);
        if (!flush()) {
          stream.pause();
          waitForDrain(onDrain);
        }
      },
      onComplete() {
        builder.finish(stream.finishReason, stream.usage);
        end();
        settle({ kind: 'completed', usage: stream.usage, finishReason: stream.finishReason });
      },
      onFail(error) {
        builder.fail(error);
        end();
        settle({ kind: 'failed', error, usage: stream.usage });
      },
    });
  });
}
