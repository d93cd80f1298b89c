import type { FastifyInstance, FastifyRequest } from 'fastify';
import { GatewayShuttingDown, InvalidRequest } from '../../errors/http-errors.js';
import type { RequestTrace } from '../../observability/tracing.js';
import { abortWhenClientLeaves } from '../../pipeline/client-watch.js';
import { endFailedRequest } from '../../pipeline/end-request.js';
import type { ApiReply, ApiRequest } from '../../pipeline/exchange.js';
import { headerForwarder } from '../../pipeline/forwarded-headers.js';
import { SSE_HEADERS } from '../../pipeline/relay.js';
import { parseResumeHeader } from '../../pipeline/request-headers.js';
import { RequestObserver } from '../../pipeline/request-observer.js';
import { sseEventWriter } from '../../pipeline/sse-event-writer.js';
import { validateBody } from '../../pipeline/validate-body.js';
import { listObject, pageOf, pageRequest } from '../../responses/pagination.js';
import { createResponseSchema } from '../../responses/request-schema.js';
import type { ResponseRun } from '../../responses/response-run.js';
import type { Terminal } from '../../responses/service.js';
import type { InputItem } from '../../responses/types.js';
import { admitCaller, callerOf } from '../caller.js';
import type { GatewayContext } from '../context.js';
import { followStoredResponse } from '../follow-stored-response.js';

type IdRequest = FastifyRequest<{ Params: { id: string }; Querystring: Record<string, string | undefined> }>;

function startSse(reply: Pick<ApiReply, 'hijack' | 'raw'>, requestId: string, worker?: string): void {
  reply.hijack();
  reply.raw.writeHead(200, {
    ...SSE_HEADERS,
    'x-request-id': requestId,
    ...(worker === undefined ? {} : { 'x-sluice-worker': worker }),
  });
}

/** Streams a live run to a client: what it emitted so far, then each new event until the terminal one. */
function watch(reply: Pick<ApiReply, 'raw'>, run: ResponseRun, startingAfter: number): Promise<void> {
  const writer = sseEventWriter(reply.raw);
  for (const json of run.events) {
    const event = JSON.parse(json) as { type: string; sequence_number: number };
    if (event.sequence_number > startingAfter) writer.write(json, event.type);
  }
  if (reply.raw.writableEnded) return Promise.resolve();
  run.addWriter(writer);
  return new Promise((resolve) => {
    reply.raw.once('close', () => {
      run.removeWriter(writer);
      resolve();
    });
  });
}

/** `starting_after` of a stream replay: a sequence number (an integer >= -1; absent: from the start). */
function parseStartingAfter(raw: unknown): number {
  if (raw === undefined) return -1;
  const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < -1) {
    throw new InvalidRequest(
      `Invalid value for 'starting_after': expected an event sequence number (an integer), got '${String(raw).slice(0, 64)}'.`,
      'starting_after',
      'invalid_value',
    );
  }
  return value;
}

/** A failed response's stable error code, for its span. */
function noteFailure(trace: RequestTrace, terminal: Terminal): void {
  if (terminal.status !== 'failed') return;
  try {
    const code = (JSON.parse(terminal.json) as { error?: { code?: unknown } }).error?.code;
    if (typeof code === 'string') trace.failed(code);
  } catch {
    // the terminal JSON is the gateway's own; nothing to note when it has no code
  }
}

/** A JSON answer the service has already serialized. */
const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * The handler of `POST /v1/responses`, written against the exchange types (see exchange.ts): the
 * framework-free route (raw-json-route.ts) serves it, and fastify what that route leaves.
 */
export function responsesCreate(
  ctx: GatewayContext,
): (request: ApiRequest, reply: ApiReply) => Promise<void> {
  const forward = headerForwarder(ctx.config.server.forwardHeaders);
  const service = ctx.responses;

  return async function create(request: ApiRequest, reply: ApiReply): Promise<void> {
    const observer = new RequestObserver(ctx.metrics, ctx.log, 'responses', request.id);
    if (ctx.tracing) {
      observer.trace = ctx.tracing.startRequest({
        api: 'responses',
        route: '/v1/responses',
        requestId: request.id,
        headers: request.headers,
        receivedAt: performance.now() - reply.elapsedTime,
      });
    }
    const controller = abortWhenClientLeaves(reply, new AbortController());
    try {
      if (ctx.lifecycle.draining) throw new GatewayShuttingDown();
      const raw = request.body as { model?: unknown } | undefined;
      observer.model = raw?.model;
      const grant = await ctx.access.admitBody(request, reply, true);
      const body = validateBody(createResponseSchema, request.body);
      const trace = observer.trace;
      trace?.request(body.model, request.body as Record<string, unknown>);
      const hashHeader = request.headers[ctx.config.routing.hashHeader];
      const prepared = await service.prepare({
        request: body,
        requestId: request.id,
        wantsText: ctx.router.wantsText(body.model),
        hashKey: typeof hashHeader === 'string' ? hashHeader : undefined,
        resume: parseResumeHeader(request.headers['x-sluice-resume']),
        onUsage: (usage) => {
          trace?.usage(usage);
          void ctx.access.recordUsage(grant, usage);
        },
        headers: forward(request.headers),
        signal: controller.signal,
        receivedAt: performance.now(),
        trace,
        caller: grant?.key.id ?? null,
      });
      trace?.response({ id: prepared.response.id, model: prepared.response.model });
      // A client's FIN is not its leaving (it may have half-closed after sending): while the MCP
      // loop waits on a tool, the server's half-close probes (api/server.ts) find a client that is
      // gone, and its socket's close aborts the request (abortWhenClientLeaves).
      if (body.background) {
        const { run, queuedJson } = await service.startBackground(prepared);
        if (!body.stream) {
          reply
            .code(200)
            .header('content-type', JSON_TYPE)
            .header('x-request-id', request.id)
            .send(Buffer.from(queuedJson));
          observer.finish(200, 'queued');
          return;
        }
        startSse(reply, request.id);
        observer.firstByte();
        await watch(reply, run, -1);
        if (!reply.raw.writableFinished) {
          // The client left before the end; the background response goes on without it.
          ctx.metrics.clientGone('responses', body.model);
          observer.finish(499, 'client_gone');
        } else observer.finish(200, 'streamed');
        return;
      }
      const opened = await service.open(prepared);
      observer.worker = opened.attempt.worker.id;
      observer.upstreamRequestId = opened.attempt.requestId;
      const shown = ctx.config.server.exposeWorker ? opened.attempt.worker.clientName : undefined;
      const run = service.newRun(prepared);
      if (body.stream) {
        startSse(reply, request.id, shown);
        observer.firstByte();
        run.addWriter(sseEventWriter(reply.raw));
        const terminal = await service.runForeground(prepared, run, opened, controller.signal);
        if (!reply.raw.writableEnded) reply.raw.end();
        if (trace) noteFailure(trace, terminal);
        // A client that went away is a 499 as on chat (the service counted the disconnect).
        if (controller.signal.aborted) observer.finish(499, 'client_gone');
        else observer.finish(200, terminal.status);
        return;
      }
      const terminal = await service.runForeground(prepared, run, opened, controller.signal);
      if (controller.signal.aborted) {
        observer.finish(499, 'client_gone');
        if (!reply.sent) reply.hijack();
        reply.raw.destroy();
        return;
      }
      reply.code(200).header('content-type', JSON_TYPE).header('x-request-id', request.id);
      if (shown !== undefined) reply.header('x-sluice-worker', shown);
      reply.send(Buffer.from(terminal.json));
      if (trace) noteFailure(trace, terminal);
      observer.finish(200, terminal.status);
    } catch (err) {
      endFailedRequest(ctx, 'responses', observer, reply, err);
    }
  };
}

export function responseRoutes(ctx: GatewayContext) {
  const service = ctx.responses;
  const create = responsesCreate(ctx);

  return async (app: FastifyInstance): Promise<void> => {
    // Reading and deleting stored responses needs a key too (when keys exist), but costs no tokens.
    app.addHook('preHandler', async (request, reply) => {
      if (request.method !== 'POST' || request.routeOptions.url !== '/v1/responses')
        await admitCaller(ctx, request, reply);
    });
    app.post('/v1/responses', (request, reply) => create(request, reply));

    app.get('/v1/responses/:id', async (request: IdRequest, reply) => {
      const { id } = request.params;
      const stored = await service.retrieve(id, callerOf(request));
      // A HEAD is answered as the stored object's head: a stream's head would wait for its first event.
      if (request.query.stream === 'true' && request.method === 'GET') {
        const startingAfter = parseStartingAfter(request.query.starting_after);
        const live = service.liveRun(id);
        if (live) {
          startSse(reply, request.id);
          await watch(reply, live, startingAfter);
          return;
        }
        startSse(reply, request.id);
        // Stored, or running on another gateway process: its events so far, then its progress.
        const caller = callerOf(request);
        await followStoredResponse(
          reply.raw,
          stored,
          () => service.retrieve(id, caller).catch(() => undefined),
          {
            startingAfter: Number.isFinite(startingAfter) ? startingAfter : -1,
            pollMs: ctx.config.responses.followPollMs,
            maxMs: ctx.config.timeouts.deadlineMs + ctx.config.responses.leaseMs,
          },
        );
        return;
      }
      reply.type('application/json').send(stored.json);
    });

    app.delete('/v1/responses/:id', async (request: IdRequest) => {
      await service.delete(request.params.id, callerOf(request));
      return { id: request.params.id, object: 'response.deleted', deleted: true };
    });

    app.post('/v1/responses/:id/cancel', async (request: IdRequest, reply) => {
      reply.type('application/json').send(await service.cancel(request.params.id, callerOf(request)));
    });

    app.get('/v1/responses/:id/input_items', async (request: IdRequest) => {
      const stored = await service.retrieve(request.params.id, callerOf(request));
      const items = JSON.parse(stored.inputItemsJson) as InputItem[];
      return listObject(pageOf(items, pageRequest(request.query)));
    });
  };
}
