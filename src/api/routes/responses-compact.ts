import type { FastifyInstance } from 'fastify';
import { GatewayShuttingDown } from '../../errors/http-errors.js';
import { abortWhenClientLeaves } from '../../pipeline/client-watch.js';
import { endFailedRequest } from '../../pipeline/end-request.js';
import { headerForwarder } from '../../pipeline/forwarded-headers.js';
import { RequestObserver } from '../../pipeline/request-observer.js';
import { validateBody } from '../../pipeline/validate-body.js';
import { compactConversation, compactRequestSchema } from '../../responses/compaction.js';
import type { GatewayContext } from '../context.js';

/** `POST /v1/responses/compact` (Open Responses): see responses/compaction.ts. */
export function responseCompactRoutes(ctx: GatewayContext) {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  return async (app: FastifyInstance): Promise<void> => {
    app.post('/v1/responses/compact', async (request, reply) => {
      const observer = new RequestObserver(ctx.metrics, ctx.log, 'responses_compact', request.id);
      const controller = abortWhenClientLeaves(reply, new AbortController());
      try {
        if (ctx.lifecycle.draining) throw new GatewayShuttingDown();
        const raw = request.body as { model?: unknown } | undefined;
        observer.model = raw?.model;
        const grant = await ctx.access.admitBody(request, reply, true);
        const body = validateBody(compactRequestSchema, request.body);
        const compacted = await compactConversation(ctx.dispatcher, ctx.store, {
          request: body,
          requestId: request.id,
          headers: forward(request.headers),
          signal: controller.signal,
          receivedAt: performance.now(),
          caller: grant?.key.id ?? null,
          pdf: ctx.responses.pdf,
        });
        void ctx.access.recordUsage(grant, {
          prompt_tokens: compacted.usage.input_tokens,
          completion_tokens: compacted.usage.output_tokens,
        });
        observer.finish(200, 'compacted');
        reply.header('x-request-id', request.id).send(compacted);
      } catch (err) {
        endFailedRequest(ctx, 'responses', observer, reply, err);
      }
    });
  };
}
