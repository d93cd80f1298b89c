import type { SluiceError } from '../errors/base.js';
import type { StreamEncoder } from '../pipeline/relay.js';

const DONE_FRAME = Buffer.from('data: [DONE]\n\n');

/**
 * The one in-band error frame of a chat/completions stream that failed after its first byte
 * (STREAMS.md section 2): OpenAI's error shape with `type: server_error` and the stable code.
 */
export function errorFrame(error: SluiceError): Buffer {
  const body = error.toBody();
  body.error.type = 'server_error';
  return Buffer.from(`data: ${JSON.stringify(body)}\n\n`);
}

/**
 * Chat completions and completions stream as the engine sent them, byte for byte (a resumed
 * stream's continuation excepted, see ResumableStream): one stateless encoder for all of them.
 */
export const CHAT_STREAM: StreamEncoder = {
  start: () => undefined,
  events: (raw) => raw,
  complete: (sawDone) => (sawDone ? undefined : DONE_FRAME),
  fail: errorFrame,
};
