import type { FastifyInstance } from 'fastify';
import { EMBEDDINGS_FRONT } from '../../fronts/embeddings.js';
import { rerankFront, scoreFront } from '../../fronts/rerank.js';
import { tokenizerFront } from '../../fronts/tokenize.js';
import type { PipelineContext } from '../../pipeline/context.js';
import type { ApiHandler } from '../../pipeline/exchange.js';
import { type WholeFront, wholeAnswerHandler } from '../../pipeline/run-whole.js';

/** The fronts that generate nothing, by path: embeddings, rerank and score, the tokenizer. */
const FRONTS: readonly WholeFront[] = [
  EMBEDDINGS_FRONT,
  rerankFront('/v1/rerank'),
  rerankFront('/v2/rerank'),
  rerankFront('/rerank'),
  scoreFront('/v1/score'),
  scoreFront('/score'),
  tokenizerFront('/tokenize'),
  tokenizerFront('/detokenize'),
];

/** Their handlers, by path: the fronts on the pipeline's whole-answer runner. */
export function poolingHandlers(ctx: PipelineContext): ReadonlyMap<string, ApiHandler> {
  return new Map(FRONTS.map((front) => [front.path, wholeAnswerHandler(ctx, front)]));
}

/** The same handlers as fastify routes (what the framework-free route leaves to fastify). */
export function poolingRoutes(handlers: ReadonlyMap<string, ApiHandler>) {
  return async (app: FastifyInstance): Promise<void> => {
    for (const [path, handler] of handlers) app.post(path, (request, reply) => handler(request, reply));
  };
}
