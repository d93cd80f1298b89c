import type { SluiceError } from '../errors/base.js';

export const DONE_FRAME = Buffer.from('data: [DONE]\n\n');

/**
 * The one in-band error frame of a chat/completions stream that failed after its first byte
 * (STREAMS.md section 2): OpenAI's error shape with `type: server_error` and the stable code.
 */
export function errorFrame(error: SluiceError): Buffer {
  const body = error.toBody();
  body.error.type = 'server_error';
  return Buffer.from(`data: ${JSON.stringify(body)}\n\n`);
}
