import type { WebSocket } from 'ws';
import type { EventWriter } from '../responses/response-run.js';

/** `WebSocket.OPEN` (the `ws` module is only imported for its types here). */
const OPEN = 1;
/**
 * Bytes queued on the socket (replies the client has not read) past which the engine is paused
 * and the client's messages are no longer read, and below which both resume.
 */
export const HIGH_WATER_BYTES = 256 * 1024;
export const LOW_WATER_BYTES = 64 * 1024;

/** What the event writer needs of a WebSocket. */
export type EventSocket = Pick<WebSocket, 'readyState' | 'bufferedAmount'> & {
  send(data: string, callback: (err?: Error) => void): void;
};

export interface SocketEventWriter extends EventWriter {
  /** Resumes whoever waits for room (the socket closed). */
  release(): void;
}

/**
 * Sends a run's events as text messages. Past `HIGH_WATER_BYTES` queued on the socket, `write`
 * answers false and the run pauses the engine; it resumes once the queue is below
 * `LOW_WATER_BYTES` (checked as each message is flushed) or the socket is gone.
 */
export function socketEventWriter(socket: EventSocket): SocketEventWriter {
  const waiters: (() => void)[] = [];
  const wake = (): void => {
    if (waiters.length === 0) return;
    if (socket.readyState === OPEN && socket.bufferedAmount >= LOW_WATER_BYTES) return;
    for (const resume of waiters.splice(0)) resume();
  };
  return {
    write(json) {
      if (socket.readyState !== OPEN) return true;
      socket.send(json, wake);
      return socket.bufferedAmount < HIGH_WATER_BYTES;
    },
    onDrain(resume) {
      waiters.push(resume);
      wake();
    },
    release() {
      for (const resume of waiters.splice(0)) resume();
    },
  };
}

/**
 * A lane's view of the connection's writer: each event with the lane's `stream_id` added (the
 * events are JSON objects, so the field goes in before the closing brace; the stored and SSE
 * events stay without it).
 */
export function taggedWriter(writer: EventWriter, streamId: string): EventWriter {
  const tail = `,"stream_id":${JSON.stringify(streamId)}}`;
  return {
    write: (json, type) => writer.write(json.slice(0, -1) + tail, type),
    onDrain: (resume) => writer.onDrain(resume),
  };
}
