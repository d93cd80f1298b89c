import { kindsOfCard, type ModelKind } from '../config/model-kind.js';
import { callWorker } from './upstream-call.js';
import type { Worker } from './worker.js';

export interface DiscoveredModels {
  ids: string[];
  /** The context length of each model that reports one (vLLM's `max_model_len`). */
  maxModelLen: Map<string, number>;
  /** What each model that declares it serves (`kind`: see kindsOfCard). */
  kinds: Map<string, readonly ModelKind[]>;
}

/** Reads the models a worker serves from its OpenAI-compatible `/v1/models`, with their `max_model_len` and kinds. */
export async function discoverModels(worker: Worker, timeoutMs: number): Promise<DiscoveredModels> {
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
  const ids: string[] = [];
  const maxModelLen = new Map<string, number>();
  const kinds = new Map<string, readonly ModelKind[]>();
  for (const entry of data) {
    const card = (entry ?? {}) as { id?: unknown; max_model_len?: unknown; kind?: unknown };
    const { id, max_model_len: length } = card;
    if (typeof id !== 'string' || id.length === 0) continue;
    ids.push(id);
    if (typeof length === 'number' && Number.isSafeInteger(length) && length > 0) maxModelLen.set(id, length);
    const declared = kindsOfCard(card);
    if (declared) kinds.set(id, declared);
  }
  if (ids.length === 0) throw new Error('GET /v1/models lists no model');
  return { ids, maxModelLen, kinds };
}
