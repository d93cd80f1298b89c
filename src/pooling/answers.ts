import type { CompletedResponse } from '../dispatch/dispatcher.js';
import { UpstreamBadResponse } from '../errors/upstream-errors.js';

/** Reading engines' answers to embeddings (and rerank and score) requests: checked, charged, joined. */

/** The input tokens an answer's usage counts: `prompt_tokens`, else `total_tokens` (rerank's only count). */
export function inputTokens(json: Record<string, unknown>): { prompt_tokens: number } | undefined {
  const usage = json.usage as { prompt_tokens?: unknown; total_tokens?: unknown } | null | undefined;
  const tokens = usage?.prompt_tokens ?? usage?.total_tokens;
  return typeof tokens === 'number' && Number.isFinite(tokens) && tokens >= 0
    ? { prompt_tokens: tokens }
    : undefined;
}

interface EmbeddingItem {
  index?: unknown;
  [field: string]: unknown;
}

/**
 * The `data` of an embeddings answer, which must hold one item per input: an engine that answers
 * fewer or more vectors than it was asked for is not believed (a 502 `upstream_bad_response`,
 * which no client can take for its vectors).
 */
export function embeddingItems(done: CompletedResponse, inputs: number): EmbeddingItem[] {
  const data = done.json.data;
  if (!Array.isArray(data) || data.length !== inputs) {
    const got = Array.isArray(data) ? `${data.length} embeddings` : 'no data array';
    throw new UpstreamBadResponse(done.attempt.worker.id, `${got} for ${inputs} inputs`);
  }
  return data as EmbeddingItem[];
}

/**
 * One embeddings answer from the answers of a batch's parts (each of `sizes[i]` inputs, in order):
 * their vectors in the order of the inputs, each `index` that of its input in the whole batch,
 * their usage added up.
 */
export function joinEmbeddings(
  done: readonly CompletedResponse[],
  sizes: readonly number[],
  model: string,
): Record<string, unknown> {
  const data: EmbeddingItem[] = [];
  let promptTokens = 0;
  let totalTokens = 0;
  let offset = 0;
  done.forEach((part, p) => {
    const items = embeddingItems(part, sizes[p]!);
    const ordered = items.every((item) => typeof item.index === 'number')
      ? [...items].sort((a, b) => (a.index as number) - (b.index as number))
      : items;
    ordered.forEach((item, i) => {
      data.push({ ...item, index: offset + i });
    });
    offset += sizes[p]!;
    const usage = part.json.usage as { prompt_tokens?: unknown; total_tokens?: unknown } | undefined;
    if (typeof usage?.prompt_tokens === 'number') promptTokens += usage.prompt_tokens;
    if (typeof usage?.total_tokens === 'number') totalTokens += usage.total_tokens;
  });
  const first = done[0]!.json;
  return {
    ...(typeof first.id === 'string' ? { id: first.id } : {}),
    object: 'list',
    data,
    model: typeof first.model === 'string' ? first.model : model,
    usage: { prompt_tokens: promptTokens, total_tokens: totalTokens },
  };
}
