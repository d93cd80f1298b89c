import { type Agent, Response as UndiciResponse, fetch as undiciFetch } from 'undici';
import { type Guard, McpMessageTooLarge, McpRedirect } from './failures.js';

/**
 * The fetch of one connection: through its own agent (pinned to the checked address), with the
 * request's headers on every request (the SSE transport's GET stream does not take
 * `requestInit`). A redirect is refused; the body of an answer that is not a success is dropped
 * unread (the SDK would put it in its error messages); every other body is read within the
 * message bound.
 */
export function boundedFetch(
  agent: Agent,
  headers: Record<string, string>,
  guard: Guard,
  maxMessageBytes: number,
): typeof fetch {
  return (async (url: string | URL, init?: RequestInit) => {
    const merged = new Headers(init?.headers);
    for (const [name, value] of Object.entries(headers)) merged.set(name, value);
    const response = await undiciFetch(url, {
      ...(init as Parameters<typeof undiciFetch>[1]),
      headers: Object.fromEntries(merged),
      redirect: 'manual',
      dispatcher: agent,
    });
    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel().catch(() => {});
      guard.status = response.status;
      throw new McpRedirect(response.status);
    }
    if (!response.ok) {
      await response.body?.cancel().catch(() => {});
      guard.status = response.status;
      return new UndiciResponse(null, { status: response.status, headers: response.headers });
    }
    if (!response.body) return response;
    const eventStream = /^\s*text\/event-stream\s*(;|$)/i.test(response.headers.get('content-type') ?? '');
    return new UndiciResponse(response.body.pipeThrough(messageLimit(maxMessageBytes, eventStream, guard)), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  }) as unknown as typeof fetch;
}

/**
 * Cuts a body past `limit` bytes in one message: an event-stream counts the bytes of each event
 * (from one blank line to the next), anything else its whole body. Cutting errors the stream
 * (which cancels the fetch and its socket) and trips the connection's guard.
 */
function messageLimit(
  limit: number,
  eventStream: boolean,
  guard: Guard,
): TransformStream<Uint8Array, Uint8Array> {
  let size = 0;
  let atLineStart = true;
  let afterCr = false;
  return new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      if (!eventStream || (chunk.indexOf(0x0a) < 0 && chunk.indexOf(0x0d) < 0)) {
        size += chunk.byteLength;
        if (chunk.byteLength > 0 && eventStream) {
          atLineStart = false;
          afterCr = false;
        }
      } else {
        for (let i = 0; i < chunk.length; i++) {
          const byte = chunk[i]!;
          if (byte === 0x0a && afterCr) {
            afterCr = false;
            continue;
          }
          afterCr = byte === 0x0d;
          if (byte === 0x0a || byte === 0x0d) {
            if (atLineStart)
              size = 0; // a blank line: the event ended
            else atLineStart = true;
          } else {
            atLineStart = false;
            size++;
          }
        }
      }
      if (size > limit) {
        const err = new McpMessageTooLarge(limit);
        guard.trip.abort(err);
        controller.error(err);
        return;
      }
      controller.enqueue(chunk);
    },
  });
}
