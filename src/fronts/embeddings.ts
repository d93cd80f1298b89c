import type { WholeFront, WholeResult, WholeTranslation } from '../pipeline/run-whole.js';
import { validateBody } from '../pipeline/validate-body.js';
import { embeddingItems, inputTokens, joinEmbeddings } from '../pooling/answers.js';
import { checkEmbeddingInputs, type EmbeddingInput, embeddingInputs } from '../pooling/batch-inputs.js';
import { embeddingsSchema } from '../pooling/request-schemas.js';

export const EMBEDDINGS_PATH = '/v1/embeddings';

/**
 * OpenAI's `POST /v1/embeddings` onto an embedding model's engines: the client's request goes as
 * it came (vLLM's own parameters pass through), its answer comes back as the engine sent it once
 * it holds one vector per input. A batch larger than `routing.batchSplitSize` (when set) goes as
 * parts to the model's workers at once, and their vectors come back joined in the inputs' order.
 */
export const EMBEDDINGS_FRONT: WholeFront = {
  api: 'embeddings',
  path: EMBEDDINGS_PATH,
  translate(request, bounds): WholeTranslation {
    const body = validateBody(embeddingsSchema, request.body);
    const inputs = embeddingInputs(body.input);
    checkEmbeddingInputs(inputs, bounds.maxInputs, bounds.contextLength(body.model));
    const raw = request.body as Record<string, unknown>;
    const split = bounds.splitSize > 0 && inputs.length > bounds.splitSize;
    const sizes = split ? partSizes(inputs.length, bounds.splitSize) : [inputs.length];
    return {
      model: body.model,
      kind: 'embedding',
      path: EMBEDDINGS_PATH,
      payload: request.rawJson ?? JSON.stringify(raw),
      parts: split ? partPayloads(raw, inputs, sizes) : undefined,
      answer(done): WholeResult {
        if (!split) {
          const only = done[0]!;
          embeddingItems(only, inputs.length);
          return { payload: only.body, contentType: only.contentType, usage: inputTokens(only.json) };
        }
        const joined = joinEmbeddings(done, sizes, body.model);
        return { payload: joined, usage: inputTokens(joined) };
      },
      traced: { model: body.model, inputs: inputs.length, encoding_format: body.encoding_format },
    };
  },
};

/** `total` inputs in parts of `size` (the last one shorter). */
function partSizes(total: number, size: number): number[] {
  const sizes: number[] = [];
  for (let from = 0; from < total; from += size) sizes.push(Math.min(size, total - from));
  return sizes;
}

/** The request of each part: the client's, with its share of the inputs. */
function partPayloads(
  raw: Record<string, unknown>,
  inputs: readonly EmbeddingInput[],
  sizes: readonly number[],
): string[] {
  const payloads: string[] = [];
  let from = 0;
  for (const size of sizes) {
    payloads.push(JSON.stringify({ ...raw, input: inputs.slice(from, from + size) }));
    from += size;
  }
  return payloads;
}
