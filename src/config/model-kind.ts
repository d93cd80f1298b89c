/**
 * What a model serves: `chat` (chat completions, completions, Messages, Responses), `embedding`
 * (`/v1/embeddings`), `rerank` (`/v1/rerank`, `/v2/rerank`, `/v1/score`: a cross-encoder). A model
 * may serve several (llama.cpp's server with `--embeddings` serves chat and embeddings); one whose
 * kinds nobody declares serves everything, and its engine answers what it cannot do.
 */
export const MODEL_KINDS = ['chat', 'embedding', 'rerank'] as const;

export type ModelKind = (typeof MODEL_KINDS)[number];

/** What a request needs of its model: one kind, or `any` (a tokenizer works on every model). */
export type KindNeeded = ModelKind | 'any';

function isKind(value: unknown): value is ModelKind {
  return typeof value === 'string' && (MODEL_KINDS as readonly string[]).includes(value);
}

/**
 * The kinds a model card of a worker's `GET /v1/models` declares in its `kind` field (a kind or
 * a list of kinds, sluice's own convention: its engine and its mock worker say it; vLLM and
 * SGLang say nothing, so their models' kinds come from `models.<m>.kind`). Undefined when it
 * declares none that is known.
 */
export function kindsOfCard(card: { kind?: unknown }): readonly ModelKind[] | undefined {
  const declared = Array.isArray(card.kind) ? card.kind : [card.kind];
  const kinds = declared.filter(isKind);
  return kinds.length > 0 ? [...new Set(kinds)] : undefined;
}
