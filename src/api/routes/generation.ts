import type { FastifyInstance } from 'fastify';
import { CHAT_FRONT, COMPLETIONS_FRONT } from '../../fronts/chat.js';
import type { PipelineContext } from '../../pipeline/context.js';
import type { ApiHandler } from '../../pipeline/exchange.js';
import { generationHandler } from '../../pipeline/run-generation.js';

/** The chat/completions and completions handlers, by path: their fronts on the pipeline. */
export function generationHandlers(ctx: PipelineContext): ReadonlyMap<string, ApiHandler> {
  return new Map<string, ApiHandler>(
    [CHAT_FRONT, COMPLETIONS_FRONT].map((front) => [front.path, generationHandler(ctx, front)]),
  );
}

/**
 * The same handlers as fastify routes: what the framework-free route (raw-json-route.ts) leaves
 * to fastify (an unusual body, a query string, a drain) is served by these.
 */
export function generationRoutes(handlers: ReadonlyMap<string, ApiHandler>) {
  return async (app: FastifyInstance): Promise<void> => {
    for (const [path, handler] of handlers) app.post(path, (request, reply) => handler(request, reply));
  };
}
