import { UpstreamErrorFrame } from '../errors/stream-errors.js';

/**
 * Recognises an engine's in-band error in a decoded SSE payload, in every shape engines send:
 * `{"error":{"message","type","code"}}` (OpenAI, vLLM, SGLang; `code` a string or an integer),
 * vLLM's bare `{"object":"error","message",...}`, and the payload of an `event: error` SSE
 * event (JSON or plain text). Returns undefined for anything that is not an error.
 */
export function errorFrameFrom(payload: unknown): UpstreamErrorFrame | undefined {
  if (typeof payload !== 'object' || payload === null) return undefined;
  const record = payload as Record<string, unknown>;
  if (record.error !== undefined && record.error !== null) {
    const inner = record.error;
    if (typeof inner === 'string') return new UpstreamErrorFrame(null, inner, null);
    if (typeof inner === 'object') return fromFields(inner as Record<string, unknown>);
  }
  if (record.object === 'error') return fromFields(record);
  return undefined;
}

/** The payload of an `event: error` event, which may be JSON or plain text. */
export function errorEventFrom(data: string | undefined): UpstreamErrorFrame {
  if (data !== undefined) {
    try {
      const parsed: unknown = JSON.parse(data);
      const frame = errorFrameFrom(parsed);
      if (frame) return frame;
      if (typeof parsed === 'object' && parsed !== null) return fromFields(parsed as Record<string, unknown>);
    } catch {
      // plain-text message
    }
  }
  return new UpstreamErrorFrame(
    null,
    data && data.length > 0 ? data : 'The engine sent an error event.',
    null,
  );
}

function fromFields(fields: Record<string, unknown>): UpstreamErrorFrame {
  const code = typeof fields.code === 'string' || typeof fields.code === 'number' ? fields.code : null;
  const type = typeof fields.type === 'string' ? fields.type : null;
  const message =
    typeof fields.message === 'string' && fields.message.length > 0
      ? fields.message
      : 'The engine sent an error.';
  return new UpstreamErrorFrame(code, message, type);
}
