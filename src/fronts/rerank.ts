import type { WholeFront, WholeTranslation } from '../pipeline/run-whole.js';
import { validateBody } from '../pipeline/validate-body.js';
import { inputTokens } from '../pooling/answers.js';
import { checkBatchSize } from '../pooling/batch-inputs.js';
import { rerankSchema, scoreSchema } from '../pooling/request-schemas.js';

/**
 * The rerank API (`POST /v1/rerank`, `/v2/rerank`, `/rerank`: Jina's and Cohere's shape, as vLLM
 * serves it), on the path it came on, for a rerank model's engines: the request goes as it came,
 * the answer comes back as the engine sent it, and its usage (`total_tokens`) is charged.
 */
export function rerankFront(path: string): WholeFront {
  return {
    api: 'rerank',
    path,
    translate(request, bounds): WholeTranslation {
      const body = validateBody(rerankSchema, request.body);
      checkBatchSize('documents', body.documents.length, bounds.maxInputs);
      return passThrough(request.rawJson, request.body, body.model, path, {
        model: body.model,
        documents: body.documents.length,
        top_n: body.top_n,
      });
    },
  };
}

/** vLLM's `POST /v1/score` (and `/score`): one text scored against each of many, or pairs of texts. */
export function scoreFront(path: string): WholeFront {
  return {
    api: 'score',
    path,
    translate(request, bounds): WholeTranslation {
      const body = validateBody(scoreSchema, request.body);
      const count = (text: string | string[]) => (typeof text === 'string' ? 1 : text.length);
      checkBatchSize('text_1', count(body.text_1), bounds.maxInputs);
      checkBatchSize('text_2', count(body.text_2), bounds.maxInputs);
      return passThrough(request.rawJson, request.body, body.model, path, {
        model: body.model,
        pairs: Math.max(count(body.text_1), count(body.text_2)),
      });
    },
  };
}

/** A rerank or score request as the client sent it, to the same path, answered as the engine did. */
function passThrough(
  rawJson: string | undefined,
  raw: unknown,
  model: string,
  path: string,
  traced: Record<string, unknown>,
): WholeTranslation {
  return {
    model,
    kind: 'rerank',
    path,
    payload: rawJson ?? JSON.stringify(raw),
    answer: ([done]) => ({
      payload: done!.body,
      contentType: done!.contentType,
      usage: inputTokens(done!.json),
    }),
    traced,
  };
}
