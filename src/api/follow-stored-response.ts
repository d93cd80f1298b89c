import type { ServerResponse } from 'node:http';
import { sseEventWriter } from '../pipeline/sse-event-writer.js';
import { isUnfinished } from '../responses/service.js';
import type { StoredResponse } from '../storage/types.js';

export interface FollowOptions {
  /** Events with a sequence number up to this one are skipped. */
  startingAfter: number;
  /** How often the store is read again while the response is unfinished. */
  pollMs: number;
  /** Longest the stream is followed; past it, the SSE response ends (the client may reconnect with starting_after). */
  maxMs: number;
}

interface StoredEvent {
  type: string;
  sequence_number: number;
}

/**
 * Streams a stored response's events to a client, then, while it is unfinished (running on
 * another gateway process), follows its progress through the store (every process writes the
 * events emitted so far with its progress) until its terminal event, then ends. Ends early when
 * the client goes, the response is deleted, or `maxMs` passes.
 */
export async function followStoredResponse(
  res: ServerResponse,
  first: StoredResponse,
  read: () => Promise<StoredResponse | undefined>,
  options: FollowOptions,
): Promise<void> {
  const writer = sseEventWriter(res);
  const until = Date.now() + options.maxMs;
  let closed = false;
  let wake: (() => void) | undefined;
  const onClose = () => {
    closed = true;
    wake?.();
  };
  res.once('close', onClose);
  let last = options.startingAfter;
  let stored: StoredResponse | undefined = first;
  try {
    while (stored && !closed && !res.writableEnded) {
      const events = stored.eventsJson ? (JSON.parse(stored.eventsJson) as StoredEvent[]) : [];
      for (const event of events) {
        if (event.sequence_number <= last) continue;
        last = event.sequence_number;
        if (!writer.write(JSON.stringify(event), event.type)) await drained(res);
        if (closed || res.writableEnded) return;
      }
      // Ended without a terminal event among the stored ones (stored before events were kept).
      if (!isUnfinished(stored.status) || Date.now() >= until) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, options.pollMs);
      });
      wake = undefined;
      if (closed) return;
      stored = await read();
    }
  } finally {
    res.off('close', onClose);
    if (!res.writableEnded) res.end();
  }
}

function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}
