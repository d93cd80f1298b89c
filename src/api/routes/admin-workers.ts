import type { FastifyInstance } from 'fastify';
import { workerSchema } from '../../config/schema.js';
import { WorkerNotFound } from '../../errors/not-found-errors.js';
import { ClientClosed } from '../../errors/stream-errors.js';
import { validateBody } from '../../pipeline/validate-body.js';
import type { GatewayContext } from '../context.js';

/** Runtime worker management: `POST/GET/DELETE /admin/workers[/:id]`. */
export function adminWorkerRoutes(ctx: GatewayContext) {
  return async (app: FastifyInstance): Promise<void> => {
    app.get('/admin/workers', async () => ({
      object: 'list',
      data: ctx.registry.list().map((w) => w.snapshot()),
    }));

    app.get<{ Params: { id: string } }>('/admin/workers/:id', async (request) => {
      const worker = ctx.registry.get(request.params.id);
      if (!worker) throw new WorkerNotFound(request.params.id);
      return worker.snapshot();
    });

    app.post('/admin/workers', async (request, reply) => {
      const config = validateBody(workerSchema, request.body);
      const worker = ctx.registry.add(config, 'admin');
      // Discover its models and health now, so that the answer says whether it can serve.
      await ctx.health.check(worker);
      ctx.log.info({ worker: worker.id, url: worker.url, healthy: worker.healthy }, 'worker registered');
      reply.code(201);
      return worker.snapshot();
    });

    // `?drain=false` ends the worker's streams in flight at once (ClientClosed); by default they run to their end.
    app.delete<{ Params: { id: string }; Querystring: { drain?: string } }>(
      '/admin/workers/:id',
      async (request) => {
        const worker = ctx.registry.remove(request.params.id);
        if (request.query.drain === 'false') {
          // Its streams' clients read this message: the worker's public name, or none.
          const error = new ClientClosed(
            worker.redact(`Worker ${worker.id} was removed; its streams were ended.`),
          );
          for (const inFlight of ctx.requests.forWorker(worker.id)) inFlight.close(error);
        }
        ctx.router.removeWorker(worker.id);
        ctx.log.info({ worker: worker.id }, 'worker removed');
        return { id: worker.id, object: 'worker', deleted: true };
      },
    );
  };
}
