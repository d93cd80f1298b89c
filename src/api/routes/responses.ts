import type { FastifyInstance, FastifyRequest } from 'fastify';
import { InvalidValue } from '../../errors/request-errors.js';
import { abortWhenClientLeaves } from '../../pipeline/client-watch.js';
import type { ApiHandler, ApiReply } from '../../pipeline/exchange.js';
import { SSE_HEADERS } from '../../pipeline/relay.js';
import { headerText, writeHead } from '../../pipeline/response-head.js';
import { responseCreate } from '../../pipeline/run-response.js';
import { sseEventWriter } from '../../pipeline/sse-event-writer.js';
import { listObject, pageOf, pageRequest } from '../../responses/pagination.js';
import type { ResponseRun } from '../../responses/response-run.js';
import type { InputItem } from '../../responses/types.js';
import { admitCaller, callerOf } from '../caller.js';
import type { GatewayContext } from '../context.js';
import { followStoredResponse } from '../follow-stored-response.js';

type IdRequest = FastifyRequest<{ Params: { id: string }; Querystring: Record<string, string | undefined> }>;

function startSse(
  reply: Pick<ApiReply, 'hijack' | 'raw'>,
  requestId: string,
  worker?: string,
  model?: string,
): void {
  const refused = writeHead(reply.raw, 200, {
    ...SSE_HEADERS,
    'x-request-id': requestId,
    ...(worker === undefined ? {} : { 'x-sluice-worker': headerText(worker) }),
    ...(model === undefined ? {} : { 'x-sluice-model': headerText(model) }),
  });
  // Not taken over: the error answer has the response.
  if (refused !== undefined) throw refused;
  reply.hijack();
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
    throw new InvalidValue(
      `Invalid value for 'starting_after': expected an event sequence number (an integer), got '${String(raw).slice(0, 64)}'.`,
      'starting_after',
    );
  }
  return value;
}

/** A JSON answer the service has already serialized. */
const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * The handler of `POST /v1/responses`: the HTTP channel of the Responses pipeline (SSE events, a
 * whole JSON answer, a queued background response), served by the framework-free route
 * (raw-json-route.ts) and by fastify for what that route leaves.
 */
export function responsesCreate(ctx: GatewayContext): ApiHandler {
  const create = responseCreate(ctx);
  return (request, reply) => {
    const signal = abortWhenClientLeaves(reply, new AbortController()).signal;
    const body = (request.body ?? {}) as Record<string, unknown>;
    return create({
      requestId: request.id,
      headers: request.headers,
      body,
      elapsedMs: reply.elapsedTime,
      signal,
      answering: reply,
      streams: (parsed) => parsed.stream === true,
      events: (worker, model) => {
        startSse(reply, request.id, worker, model);
        return sseEventWriter(reply.raw);
      },
      answer: (json, worker, model) => {
        reply.code(200).header('content-type', JSON_TYPE).header('x-request-id', request.id);
        if (worker !== undefined) reply.header('x-sluice-worker', headerText(worker));
        if (model !== undefined) reply.header('x-sluice-model', headerText(model));
        reply.send(Buffer.from(json));
      },
      watch: async (run) => {
        startSse(reply, request.id);
        await watch(reply, run, -1);
        return reply.raw.writableFinished;
      },
      gone: () => {
        if (!reply.sent) reply.hijack();
        reply.raw.destroy();
      },
      fail: (error) => {
        throw error;
      },
    });
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
