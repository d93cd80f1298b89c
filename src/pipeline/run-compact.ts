import { compactConversation, compactRequestSchema } from '../responses/compaction.js';
import type { PdfReader } from '../responses/pdf-reader.js';
import type { Store } from '../storage/types.js';
import { admitRequest, modelRule } from './admit.js';
import { abortWhenClientLeaves } from './client-watch.js';
import type { PipelineContext } from './context.js';
import type { ApiHandler } from './exchange.js';
import { headerForwarder } from './request-headers.js';
import { endFailedRequest, RequestObserver } from './request-observer.js';
import { validateBody } from './validate-body.js';

export interface CompactPipelineContext extends PipelineContext {
  readonly store: Store | undefined;
  readonly responses: { readonly pdf: PdfReader };
}

/**
 * `POST /v1/responses/compact` (Open Responses) on the pipeline: observed, refused while
 * draining, admitted and charged like any generation, then one whole engine answer (the
 * summary) in the compaction's shape (responses/compaction.ts).
 */
export function compactHandler(ctx: CompactPipelineContext): ApiHandler {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  return async (request, reply) => {
    // Counted and logged under its own route label; it opens no span (it streams nothing to trace).
    const observer = new RequestObserver(ctx.metrics, ctx.log, 'responses_compact', request.id);
    const signal = abortWhenClientLeaves(reply, new AbortController()).signal;
    try {
      observer.model = (request.body as { model?: unknown } | undefined)?.model;
      const admitting = admitRequest(ctx, request, reply);
      const grant = admitting === undefined ? undefined : await admitting;
      const body = validateBody(compactRequestSchema, request.body);
      const compacted = await compactConversation(ctx.dispatcher, ctx.store, {
        request: body,
        requestId: request.id,
        headers: forward(request.headers),
        signal,
        receivedAt: performance.now(),
        caller: grant?.key.id ?? null,
        mayUse: modelRule(grant),
        pdf: ctx.responses.pdf,
      });
      void ctx.access.recordUsage(grant, {
        prompt_tokens: compacted.usage.input_tokens,
        completion_tokens: compacted.usage.output_tokens,
      });
      observer.finish(200, 'compacted');
      reply.code(200).header('x-request-id', request.id).send(compacted);
    } catch (err) {
      endFailedRequest(ctx, 'responses', observer, reply, err);
    }
  };
}
