import type { ServerResponse } from 'node:http';

/**
 * A header value that carries text the gateway did not write itself (a model's name as a worker
 * reported it, a worker's configured id): its visible ASCII but `%` as is, every other byte of
 * its UTF-8 (spaces, `%`, control characters, anything past ASCII) percent-encoded, so that
 * `decodeURIComponent` gives the text back. node:http refuses a value past Latin-1 or with a
 * control character outright; this one is always writable, and `meta-llama/Llama-3.1-8B` is
 * unchanged.
 */
export function headerText(text: string): string {
  if (PLAIN.test(text)) return text;
  let out = '';
  // A lone surrogate becomes U+FFFD's bytes: the value is total, whatever the string.
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte > 0x20 && byte < 0x7f && byte !== 0x25 ? String.fromCharCode(byte) : HEX[byte]!;
  }
  return out;
}

const PLAIN = /^[\x21-\x24\x26-\x7e]*$/;
const HEX = Array.from({ length: 256 }, (_, b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`);

/**
 * Writes a response's status and headers. When node:http refuses a header (a value it cannot
 * write), nothing is written, the headers this call set are taken back, and the error is
 * returned: the caller answers an error without them instead of throwing out of the request.
 */
export function writeHead(
  res: ServerResponse,
  status: number,
  headers: Readonly<Record<string, string>>,
): Error | undefined {
  try {
    res.writeHead(status, headers);
    return undefined;
  } catch (err) {
    // With headers set before (setHeader), writeHead sets these one by one: some may be set.
    if (!res.headersSent) for (const name of Object.keys(headers)) res.removeHeader(name);
    return err instanceof Error ? err : new Error(String(err));
  }
}
