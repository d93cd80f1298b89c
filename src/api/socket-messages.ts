import type { RawData } from 'ws';
import { InvalidJson, InvalidValue, UnsupportedParameter } from '../errors/request-errors.js';
import { InvalidMessage, UnknownEventType } from '../errors/websocket-errors.js';
import { MAX_JSON_DEPTH, nestedDeeperThan } from './json-body.js';

/** Fields of an HTTP create body that a WebSocket `response.create` must not carry (Open Responses). */
const HTTP_ONLY_FIELDS = ['stream', 'stream_options', 'background'] as const;
/** The longest `stream_id` taken (it is echoed on every event of its responses). */
export const MAX_STREAM_ID_LENGTH = 256;

/** What a WebSocket client sends: `response.create` messages, read and checked. */

/** Admission's rate-limit headers have nowhere to go after the upgrade: they are dropped. */
export const NO_HEADERS = { raw: { setHeader: () => undefined } };

/** Refuses what a WebSocket create may not carry (Open Responses), before admission. */
export function refuseHttpOnlyFields(body: Record<string, unknown>): void {
  for (const field of HTTP_ONLY_FIELDS) {
    if (field in body) {
      throw new UnsupportedParameter(
        `'${field}' cannot be sent in a WebSocket response.create: every response is streamed as messages, and background mode is not available over WebSocket.`,
        field,
      );
    }
  }
  if (body.generate === false) {
    throw new UnsupportedParameter(
      'generate: false (a warm-up without generation) is not supported by this gateway.',
      'generate',
    );
  }
}

/** The `stream_id` of a create (a WebSocket envelope field: it is not part of the response body). */
export function streamIdOf(event: Record<string, unknown>): string | undefined {
  const streamId = event.stream_id;
  if (streamId === undefined || streamId === null) return undefined;
  if (typeof streamId !== 'string' || streamId.length === 0 || streamId.length > MAX_STREAM_ID_LENGTH) {
    throw new InvalidValue(
      `stream_id must be a non-empty string of at most ${MAX_STREAM_ID_LENGTH} characters.`,
      'stream_id',
    );
  }
  return streamId;
}

export function rawBytes(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/** A client message: a JSON object whose `type` is `response.create`. */
export function parseEvent(text: string): Record<string, unknown> {
  let event: unknown;
  try {
    event = JSON.parse(text);
  } catch (err) {
    throw new InvalidJson(`The message is not valid JSON: ${(err as Error).message}`);
  }
  if (nestedDeeperThan(event, MAX_JSON_DEPTH)) {
    throw new InvalidJson(
      `The message is not valid JSON: it is nested more than ${MAX_JSON_DEPTH} levels deep.`,
    );
  }
  if (typeof event !== 'object' || event === null || Array.isArray(event)) {
    throw new InvalidMessage('A message must be a JSON object with a type.', 'type');
  }
  const type = (event as { type?: unknown }).type;
  if (type !== 'response.create') {
    throw new UnknownEventType(type);
  }
  return event as Record<string, unknown>;
}
