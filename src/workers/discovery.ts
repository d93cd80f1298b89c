import { kindsOfCard, type ModelKind } from '../config/model-kind.js';
import { callWorker } from './upstream-call.js';
import type { Worker } from './worker.js';

export interface DiscoveredModels {
  ids: string[];
  /** The context length of each model that reports one (vLLM's `max_model_len`). */
  maxModelLen: Map<string, number>;
  /**
   * The LoRA adapters among `ids`, to their base model: vLLM lists each adapter with `parent`
   * naming its base model (`null` on a base model); `root` is the adapter's path then.
   */
  adapters: Map<string, string>;
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
  const parents = new Map<string, string>();
  for (const entry of data) {
    const card = (entry ?? {}) as { id?: unknown; max_model_len?: unknown; kind?: unknown; parent?: unknown };
    const { id, max_model_len: length, parent } = card;
    if (typeof id !== 'string' || id.length === 0) continue;
    ids.push(id);
    if (typeof length === 'number' && Number.isSafeInteger(length) && length > 0) maxModelLen.set(id, length);
    const declared = kindsOfCard(card);
    if (declared) kinds.set(id, declared);
    if (typeof parent === 'string' && parent.length > 0 && parent !== id) parents.set(id, parent);
  }
  if (ids.length === 0) throw new Error('GET /v1/models lists no model');
  // An adapter's base model is one the engine lists too (else `parent` means something else).
  const adapters = new Map([...parents].filter(([, base]) => ids.includes(base) && !parents.has(base)));
  return { ids, maxModelLen, kinds, adapters };
}
