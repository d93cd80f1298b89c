import type { Dispatcher } from 'undici';
import type { Worker } from './worker.js';

/** A small GET/POST against a worker's control endpoints (health, models, utilities), bounded in time. */
export async function callWorker(
  worker: Worker,
  method: 'GET' | 'POST',
  path: string,
  timeoutMs: number,
  body?: unknown,
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
  const text = await response.body.text();
  return { status: response.statusCode, text };
}
