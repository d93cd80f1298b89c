import { kindsOfCard, type ModelKind } from '../config/model-kind.js';
import { type RefusedNames, screenNames } from './reported-names.js';
import { callWorker } from './upstream-call.js';
import type { Worker } from './worker.js';

/** The most models one worker's `/v1/models` may list; the rest are ignored (a warning says so). */
export const MAX_LISTED_MODELS = 4096;
/** The most bytes of a `/v1/models` answer read (4096 cards of ~2 KiB each). */
export const MODELS_MAX_BYTES = 8 * 1024 * 1024;

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
  /** Names refused by the rule of reported-names.ts. */
  refused: RefusedNames;
  /** Models listed past MAX_LISTED_MODELS, ignored. */
  ignored: number;
}

/**
 * Reads the models a worker serves from its OpenAI-compatible `/v1/models`, with their
 * `max_model_len` and kinds: at most MODELS_MAX_BYTES of answer, at most MAX_LISTED_MODELS
 * distinct models, each name one reported-names.ts accepts (the others are not served).
 */
export async function discoverModels(worker: Worker, timeoutMs: number): Promise<DiscoveredModels> {
  const { status, text } = await callWorker(
    worker,
    'GET',
    '/v1/models',
    timeoutMs,
    undefined,
    MODELS_MAX_BYTES,
  );
  if (status !== 200) throw new Error(`GET /v1/models answered HTTP ${status}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error('GET /v1/models did not answer JSON');
  }
  const data = (parsed as { data?: unknown }).data;
  if (!Array.isArray(data)) throw new Error('GET /v1/models has no data array');
  const listed = new Set<string>();
  const maxModelLen = new Map<string, number>();
  const kinds = new Map<string, readonly ModelKind[]>();
  const parents = new Map<string, string>();
  const named = screenNames(
    data.flatMap((entry) => {
      const id = (entry as { id?: unknown } | null)?.id;
      return typeof id === 'string' && id.length > 0 ? [id] : [];
    }),
  );
  const accepted = new Set(named.accepted);
  let ignored = 0;
  for (const entry of data) {
    const card = (entry ?? {}) as { id?: unknown; max_model_len?: unknown; kind?: unknown; parent?: unknown };
    const { id, max_model_len: length, parent } = card;
    if (typeof id !== 'string' || !accepted.has(id) || listed.has(id)) continue;
    if (listed.size === MAX_LISTED_MODELS) {
      ignored++;
      continue;
    }
    listed.add(id);
    if (typeof length === 'number' && Number.isSafeInteger(length) && length > 0) maxModelLen.set(id, length);
    const declared = kindsOfCard(card);
    if (declared) kinds.set(id, declared);
    if (typeof parent === 'string' && parent.length > 0 && parent !== id) parents.set(id, parent);
  }
  if (listed.size === 0) {
    const refused = named.refused.count > 0 ? ` (${named.refused.count} names refused)` : '';
    throw new Error(`GET /v1/models lists no model${refused}`);
  }
  // An adapter's base model is one the engine lists too (else `parent` means something else).
  const adapters = new Map([...parents].filter(([, base]) => listed.has(base) && !parents.has(base)));
  return { ids: [...listed], maxModelLen, kinds, adapters, refused: named.refused, ignored };
}
