import type { Dispatcher } from 'undici';
import type { Worker } from './worker.js';

/** The most bytes of a control endpoint's answer read by default (health, utilities: a few bytes). */
export const CONTROL_ANSWER_MAX_BYTES = 1024 * 1024;

/**
 * A small GET/POST against a worker's control endpoints (health, models, utilities), bounded in
 * time and in the bytes of its answer held (`maxBytes`: past it the call fails and the rest is
 * not read).
 */
export async function callWorker(
  worker: Worker,
  method: 'GET' | 'POST',
  path: string,
  timeoutMs: number,
  body?: unknown,
  maxBytes = CONTROL_ANSWER_MAX_BYTES,
): Promise<{ status: number; text: string }> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (worker.apiKey) headers.authorization = `Bearer ${worker.apiKey}`;
  const options: Dispatcher.RequestOptions = {
    method,
    path: worker.basePath + path,
    headers,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    signal: AbortSignal.timeout(timeoutMs),
  };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    options.body = JSON.stringify(body);
  }
  const response = await worker.pool.request(options);
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > maxBytes) throw new Error(`${method} ${path} answered more than ${maxBytes} bytes`);
      parts.push(chunk);
    }
  } finally {
    if (!response.body.readableEnded) {
      // Cut: undici reports the cut as an error of the body, which nobody reads any more.
      response.body.on('error', () => {});
      response.body.destroy();
    }
  }
  return { status: response.statusCode, text: Buffer.concat(parts, size).toString('utf8') };
}
