import { callWorker } from './upstream-call.js';
import type { Worker } from './worker.js';

/** Reads the models a worker serves from its OpenAI-compatible `/v1/models`. */
export async function discoverModels(worker: Worker, timeoutMs: number): Promise<string[]> {
  const { status, text } = await callWorker(worker, 'GET', '/v1/models', timeoutMs);
  if (status !== 200) throw new Error(`GET /v1/models answered HTTP ${status}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error('GET /v1/models did not answer JSON');
  }
  const data = (parsed as { data?: unknown }).data;
  if (!Array.isArray(data)) throw new Error('GET /v1/models has no data array');
  const ids = data
    .map((entry: unknown) => (entry as { id?: unknown }).id)
    .filter((id): id is string => typeof id === 'string' && id.length > 0);
  if (ids.length === 0) throw new Error('GET /v1/models lists no model');
  return ids;
}
