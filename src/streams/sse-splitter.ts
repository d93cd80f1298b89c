/**
 * Splits a byte stream of Server-Sent Events into whole events, keeping their exact bytes.
 *
 * Written by hand because eventsource-parser (used where only the decoded fields matter)
 * hands out decoded field values, not the raw byte ranges of each event: the relay must
 * forward a healthy stream byte-for-byte and must never forward half an event (a failure
 * frame written after half an event would be corrupted). An event ends at a blank line:
 * `\n\n`, `\r\n\r\n`, or `\r\r` (and the mixed forms), per the WHATWG SSE grammar.
 */
export class SseSplitter {
  private pending: Buffer | undefined;
  /** Bytes held back waiting for the end of their event. */
  get bufferedBytes(): number {
    return this.pending?.length ?? 0;
  }

  /**
   * Adds a chunk; calls `onEvent` for every event it completes, in order, with a view of the
   * event's bytes including its terminating blank line.
   * Returns the bytes of all the events it completed, back to back (one buffer to write).
   */
  push(chunk: Buffer, onEvent: (raw: Buffer) => void): Buffer {
    let data: Buffer;
    if (this.pending) {
      data = Buffer.concat([this.pending, chunk]);
      this.pending = undefined;
    } else {
      data = chunk;
    }
    let start = 0;
    let i = 0;
    const length = data.length;
    while (i < length) {
      const c = data[i]!;
      if (c !== 0x0a && c !== 0x0d) {
        i++;
        continue;
      }
      // Found the end of a line at i; the line terminator is \r\n, \n or \r.
      let next = i + 1;
      if (c === 0x0d) {
        if (next >= length) break; // cannot tell \r from \r\n yet
        if (data[next] === 0x0a) next++;
      }
      // A blank line follows when the next byte starts another line terminator.
      if (next >= length) break;
      const d = data[next]!;
      if (d === 0x0a || d === 0x0d) {
        let end = next + 1;
        if (d === 0x0d) {
          if (end >= length) break;
          if (data[end] === 0x0a) end++;
        }
        onEvent(data.subarray(start, end));
        start = end;
        i = end;
      } else {
        i = next;
      }
    }
    if (start < length) this.pending = Buffer.from(data.subarray(start));
    return start === length ? data : data.subarray(0, start);
  }
}

export interface SseFields {
  /** The `event:` field, undefined for the default `message` event. */
  event: string | undefined;
  /** The `data:` lines joined with `\n`; undefined when the event had no data line (a comment). */
  data: string | undefined;
}

/** Decodes the fields of one whole event as the SSE grammar says (comments and `id`/`retry` skipped). */
export function parseSseFields(raw: Buffer): SseFields {
  const text = raw.toString('utf8');
  // Fast path: the overwhelmingly common `data: <json>\n\n` shape of every engine.
  if (text.startsWith('data: ') && text.endsWith('\n\n') && text.indexOf('\n') === text.length - 2) {
    return { event: undefined, data: text.slice(6, -2) };
  }
  let event: string | undefined;
  let data: string | undefined;
  for (const line of text.split(/\r\n|\r|\n/)) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data = data === undefined ? value : `${data}\n${value}`;
    else if (field === 'event') event = value;
  }
  return { event, data };
}
