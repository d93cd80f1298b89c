import type { IncomingHttpHeaders } from 'node:http';
import type { SluiceError } from '../errors/base.js';
import type { ApiName } from '../observability/metrics.js';
import type { Worker } from '../workers/worker.js';
import { admitRequest } from './admit.js';
import type { PipelineContext } from './context.js';
import type { ApiHandler } from './exchange.js';
import { endFailedRequest, RequestObserver } from './request-observer.js';

/** What a utility front answers: a JSON object, its headers, and what its log line notes. */
export interface UtilityAnswer {
  readonly payload: object;
  readonly headers?: Readonly<Record<string, string>> | undefined;
  readonly fields?: Readonly<Record<string, unknown>> | undefined;
}

/**
 * A front of the utility kind: a request for one model that generates nothing but costs an
 * engine call (Anthropic's count_tokens, a tokenizer), charged like a generation.
 */
export interface UtilityFront<B extends { model: string }> {
  /** The API it belongs to (a client that leaves is counted under it). */
  readonly api: ApiName;
  /** The `route` label of its requests in the metrics and logs. */
  readonly route: string;
  credential?(headers: IncomingHttpHeaders): string | undefined;
  statusOf?(error: SluiceError): number;
  /** Validates the body: throws typed errors. */
  validate(body: unknown): B;
  /** The answer, given a healthy worker of the model (none: the front answers without one). */
  answer(body: B, worker: Worker | undefined, requestId: string): Promise<UtilityAnswer>;
}

/** The handler of a utility front: observed, refused while draining, admitted, then answered. */
export function utilityHandler<B extends { model: string }>(
  ctx: PipelineContext,
  front: UtilityFront<B>,
): ApiHandler {
  return async (request, reply) => {
    const observer = new RequestObserver(ctx.metrics, ctx.log, front.route, request.id);
    try {
      // It spends no generation, but it costs an engine call: admitted like any request, against
      // the key's rate limits and budget.
      const admitting = admitRequest(ctx, request, reply, front.credential?.(request.headers));
      if (admitting !== undefined) await admitting;
      const body = front.validate(request.body);
      ctx.dispatcher.assertModel(body.model);
      observer.model = body.model;
      const worker = ctx.dispatcher.healthyWorker(body.model);
      if (worker) observer.worker = worker.id;
      const answer = await front.answer(body, worker, request.id);
      reply.code(200).header('x-request-id', request.id);
      if (answer.headers)
        for (const [name, value] of Object.entries(answer.headers)) reply.header(name, value);
      reply.send(answer.payload);
      observer.finish(200, 'completed', answer.fields);
    } catch (err) {
      endFailedRequest(ctx, front.api, observer, reply, err, front.statusOf);
    }
  };
}
