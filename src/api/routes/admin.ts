import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { GatewayContext } from '../context.js';
import { adminKeyRoutes } from './admin-keys.js';
import { adminModelRoutes } from './admin-models.js';
import { adminReplicaRoutes } from './admin-replicas.js';
import { adminWorkerRoutes } from './admin-workers.js';
import { dashboardRoutes } from './dashboard.js';

type Plugin = (app: FastifyInstance) => Promise<void>;

/**
 * The admin API and the dashboard, each behind a guard registered with its routes.
 *
 * The guard is an `onRequest` hook of the plugin scope the routes live in, so fastify runs it
 * for exactly the routes the router matched in that scope, after it decoded the path: the
 * decision is made on the route that will run, whatever the URL's spelling (`/%61dmin/keys`,
 * `/admin/keys?`, ...). A check on the raw URL's prefix let every encoded spelling through.
 */
export function adminRoutes(ctx: GatewayContext) {
  const guarded =
    (queryKey: boolean, plugins: Plugin[]): Plugin =>
    async (scope) => {
      scope.addHook(
        'onRequest',
        (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) => {
          try {
            const key = queryKey ? (request.query as { key?: unknown } | undefined)?.key : undefined;
            ctx.access.requireAdmin(request.headers.authorization, typeof key === 'string' ? key : undefined);
          } catch (err) {
            done(err as Error);
            return;
          }
          done();
        },
      );
      for (const plugin of plugins) scope.register(plugin);
    };
  return async (app: FastifyInstance): Promise<void> => {
    app.register(
      guarded(false, [
        adminWorkerRoutes(ctx),
        adminModelRoutes(ctx),
        adminKeyRoutes(ctx),
        adminReplicaRoutes(ctx),
      ]),
    );
    // The dashboard's page opens its event stream with `?key=` (EventSource sends no headers).
    app.register(guarded(true, [dashboardRoutes(ctx)]));
  };
}
