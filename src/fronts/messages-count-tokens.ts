import { estimateTokens, TokenizerClient } from '../messages/count-tokens.js';
import { anthropicStatus } from '../messages/errors.js';
import { type CountTokensRequest, countTokensRequestSchema } from '../messages/request-schema.js';
import type { UtilityFront } from '../pipeline/run-utility.js';
import { validateBody } from '../pipeline/validate-body.js';
import { anthropicCredential } from './messages.js';

/**
 * Anthropic's `POST /v1/messages/count_tokens`: the engine's own tokenizer when a healthy worker
 * of the model has one (`/tokenize`), else the gateway's estimate; the header
 * `x-sluice-token-count` says which.
 */
export function countTokensFront(): UtilityFront<CountTokensRequest> {
  const tokenizer = new TokenizerClient();
  return {
    api: 'messages',
    route: 'messages_count_tokens',
    credential: anthropicCredential,
    statusOf: anthropicStatus,
    validate: (body) => validateBody(countTokensRequestSchema, body),
    async answer(body, worker, requestId) {
      const count = worker ? await tokenizer.count(worker, body) : undefined;
      const source = count === undefined ? 'estimate' : 'tokenizer';
      return {
        payload: { input_tokens: count ?? estimateTokens(body) },
        headers: { 'request-id': requestId, 'x-sluice-token-count': source },
        fields: { tokenCount: source },
      };
    },
  };
}
