/** The default bound of one SSE event: 1 MiB. */
export const DEFAULT_MAX_EVENT_BYTES = 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;

/**
 * Splits a byte stream of Server-Sent Events into whole events, keeping their exact bytes.
 *
 * Written by hand because eventsource-parser (used where only the decoded fields matter)
 * hands out decoded field values, not the raw byte ranges of each event: the relay must
 * forward a healthy stream byte-for-byte and must never forward half an event (a failure
 * frame written after half an event would be corrupted). An event ends at a blank line:
 * `\n\n`, `\r\n\r\n`, or `\r\r` (and the mixed forms), per the WHATWG SSE grammar.
 *
 * Bounded and linear: every byte is scanned once (the scanner's state carries over between
 * chunks, so an event that never ends is never rescanned), the bytes of an unfinished event are
 * held as a list of chunks and joined only when the event completes, and an event longer than
 * `maxEventBytes` stops the splitter (`overflowed`) instead of growing its buffer.
 */
export class SseSplitter {
  /** Chunks (or the tail of one) of the event not finished yet. */
  private parts: Buffer[] = [];
  private partsLength = 0;
  /** The last byte scanned ended a line (a terminator), with nothing after it yet. */
  private afterTerminator = false;
  /** The last byte scanned was `\r`: a `\n` next belongs to the same terminator. */
  private pendingCR = false;
  /** That `\r` ended an empty line, so it ended the event (with or without a `\n` after it). */
  private pendingCRIsBlank = false;
  /** Set once an event passed `maxEventBytes`; nothing more is split after that. */
  overflowed = false;

  constructor(readonly maxEventBytes: number = DEFAULT_MAX_EVENT_BYTES) {}

  /** Bytes held back waiting for the end of their event. */
  get bufferedBytes(): number {
    return this.partsLength;
  }

  /**
   * Adds a chunk; calls `onEvent` for every event it completes, in order, with the event's bytes
   * including its terminating blank line: `bytes[start, end)` (no view is made per event: the
   * relay's hot path reads its fields in place, see parseSseFieldsAt).
   * Returns the bytes of all the events it completed, back to back (one buffer to write).
   * When an event passes the bound, `overflowed` is set and the events before it are returned.
   */
  push(chunk: Buffer, onEvent: (bytes: Buffer, start: number, end: number) => void): Buffer {
    if (this.overflowed) return EMPTY;
    const held = this.partsLength;
    const length = chunk.length;
    /** The pending bytes and the chunk joined, made on the first event end only. */
    let data: Buffer | undefined;
    /** Start of the current event, as an offset into pending + chunk. */
    let eventStart = 0;
    const endEvent = (endInChunk: number): boolean => {
      const end = held + endInChunk;
      if (end - eventStart > this.maxEventBytes) {
        this.overflowed = true;
        return false;
      }
      data ??= held === 0 ? chunk : Buffer.concat([...this.parts, chunk], held + length);
      onEvent(data, eventStart, end);
      eventStart = end;
      this.afterTerminator = false;
      return true;
    };
    let i = 0;
    let nextCR = chunk.indexOf(CR);
    while (i < length) {
      if (this.pendingCR) {
        this.pendingCR = false;
        if (chunk[i] === LF) {
          // `\r\n`: one terminator.
          if (this.pendingCRIsBlank) {
            if (!endEvent(i + 1)) break;
          } else this.afterTerminator = true;
          i++;
          continue;
        }
        // A lone `\r`; the byte at i is looked at afresh below.
        if (this.pendingCRIsBlank) {
          if (!endEvent(i)) break;
        } else this.afterTerminator = true;
      }
      if (nextCR !== -1 && nextCR < i) nextCR = chunk.indexOf(CR, i);
      const nextLF = chunk.indexOf(LF, i);
      const t = nextLF === -1 ? nextCR : nextCR === -1 ? nextLF : Math.min(nextLF, nextCR);
      if (t === -1) {
        this.afterTerminator = false;
        break;
      }
      if (t > i) this.afterTerminator = false;
      if (chunk[t] === LF) {
        if (this.afterTerminator) {
          if (!endEvent(t + 1)) break;
        } else this.afterTerminator = true;
      } else {
        this.pendingCR = true;
        this.pendingCRIsBlank = this.afterTerminator;
      }
      i = t + 1;
    }
    if (this.overflowed) {
      this.parts = [];
      this.partsLength = 0;
      return data === undefined || eventStart === 0 ? EMPTY : data.subarray(0, eventStart);
    }
    if (data === undefined) {
      // No event ended: hold the chunk as it is (no copy, no rescan later).
      this.parts.push(chunk);
      this.partsLength += length;
      if (this.partsLength > this.maxEventBytes) {
        this.overflowed = true;
        this.parts = [];
        this.partsLength = 0;
      }
      return EMPTY;
    }
    const total = held + length;
    if (eventStart < total) {
      // A copy: the tail must not keep the whole chunk (or the joined buffer) alive.
      this.parts = [Buffer.from(data.subarray(eventStart))];
      this.partsLength = total - eventStart;
    } else {
      this.parts = [];
      this.partsLength = 0;
    }
    if (this.partsLength > this.maxEventBytes) {
      this.overflowed = true;
      this.parts = [];
      this.partsLength = 0;
    }
    return eventStart === data.length ? data : data.subarray(0, eventStart);
  }
}

const EMPTY = Buffer.alloc(0);

export interface SseFields {
  /** The `event:` field, undefined for the default `message` event. */
  event: string | undefined;
  /** The `data:` lines joined with `\n`; undefined when the event had no data line (a comment). */
  data: string | undefined;
}

/** Decodes the fields of one whole event as the SSE grammar says (comments and `id`/`retry` skipped). */
export function parseSseFields(raw: Buffer): SseFields {
  return parseSseFieldsAt(raw, 0, raw.length);
}

/**
 * The data of an event of the overwhelmingly common `data: <payload>\n\n` shape of every
 * engine at `bytes[start, end)`, decoded in one step; undefined for any other shape (parse
 * those with parseSseFieldsAt).
 */
export function plainEventData(bytes: Buffer, start: number, end: number): string | undefined {
  if (
    end - start >= 8 &&
    bytes[start] === 0x64 && // d
    bytes[start + 1] === 0x61 && // a
    bytes[start + 2] === 0x74 && // t
    bytes[start + 3] === 0x61 && // a
    bytes[start + 4] === 0x3a && // :
    bytes[start + 5] === 0x20 && // space
    bytes[end - 1] === LF &&
    bytes[end - 2] === LF &&
    bytes.indexOf(LF, start + 6) === end - 2
  ) {
    return bytes.toString('utf8', start + 6, end - 2);
  }
  return undefined;
}

/** parseSseFields of the event at `bytes[start, end)`. */
export function parseSseFieldsAt(bytes: Buffer, start: number, end: number): SseFields {
  const plain = plainEventData(bytes, start, end);
  if (plain !== undefined) return { event: undefined, data: plain };
  return parseSseText(bytes.toString('utf8', start, end));
}

/** The fields of one whole event's text, line by line (what parseSseFieldsAt does past its one-step path). */
export function parseSseText(text: string): SseFields {
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
