import type { WholeFront, WholeTranslation } from '../pipeline/run-whole.js';
import { validateBody } from '../pipeline/validate-body.js';
import { detokenizeSchema, tokenizeSchema } from '../pooling/request-schemas.js';

/**
 * vLLM's tokenizer endpoints (`POST /tokenize`, `POST /detokenize`) passed through to a worker of
 * the model, whatever its kind: the model's own tokenizer answers. No tokens are charged (the
 * request is still admitted against the key's request rate).
 */
export function tokenizerFront(path: '/tokenize' | '/detokenize'): WholeFront {
  const schema = path === '/tokenize' ? tokenizeSchema : detokenizeSchema;
  return {
    api: 'tokenize',
    path,
    translate(request): WholeTranslation {
      const body = validateBody(schema, request.body);
      return {
        model: body.model,
        kind: 'any',
        path,
        payload: request.rawJson ?? JSON.stringify(request.body),
        answer: ([done]) => ({ payload: done!.body, contentType: done!.contentType, usage: undefined }),
        traced: { model: body.model },
      };
    },
  };
}
