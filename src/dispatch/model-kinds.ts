import type { KindNeeded, ModelKind } from '../config/model-kind.js';
import { WrongModelKind } from '../errors/batch-errors.js';
import type { Worker } from '../workers/worker.js';

/**
 * What `model` serves: its configured kinds (`models.<m>.kind`), else every kind its workers'
 * `/v1/models` declare; undefined when nobody says (the model then serves every kind). No
 * allocation unless a worker declares kinds: it runs on every chat request.
 */
export function servedKinds(
  model: string,
  configured: readonly ModelKind[] | undefined,
  workers: readonly Worker[],
): readonly ModelKind[] | undefined {
  if (configured) return configured;
  let declared: Set<ModelKind> | undefined;
  for (const worker of workers) {
    if (worker.modelKinds.size === 0) continue;
    const kinds = worker.modelKinds.get(model);
    if (!kinds) continue;
    declared ??= new Set();
    for (const kind of kinds) declared.add(kind);
  }
  return declared && [...declared];
}

const NEEDED_NAMES: Record<ModelKind, string> = {
  chat: 'chat, completions, Messages or Responses',
  embedding: 'embeddings',
  rerank: 'rerank or score',
};

/** Throws WrongModelKind when `model` (serving `served`) does not serve `needed` requests. */
export function assertKind(
  model: string,
  needed: KindNeeded,
  served: readonly ModelKind[] | undefined,
): void {
  if (needed === 'any' || served === undefined || served.includes(needed)) return;
  throw new WrongModelKind(model, NEEDED_NAMES[needed], served);
}
