import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { DashboardHub } from '../../dashboard/hub.js';
import { DASHBOARD_HTML } from '../../dashboard/page.js';
import { SnapshotBuilder } from '../../dashboard/snapshot.js';
import type { GatewayContext } from '../context.js';

/** A client whose socket has not drained for this many ticks in a row is disconnected. */
const MAX_SKIPPED_TICKS = 60;

/** The page runs inline script and style only, talks to its own origin only, and is never framed. */
const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'content-security-policy':
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
};

/**
 * The operator dashboard: `GET /dashboard` (the page), `GET /dashboard/data` (one snapshot as
 * JSON) and `GET /dashboard/events` (SSE: a snapshot at once, then one a second). The snapshot is
 * built once per tick by a shared timer while someone watches, whatever the number of viewers;
 * the history it plots is sampled every tick all the time. Authentication (the admin key, `Authorization` or `?key=`) is left to the gateway.
 */
export function dashboardRoutes(ctx: GatewayContext) {
  const builder = new SnapshotBuilder(ctx);
  const hub = new DashboardHub(() => builder.build(), ctx.log, {
    intervalMs: builder.intervalMs,
    record: () => builder.record(),
  });
  const streams = new Set<ServerResponse>();
  return async (app: FastifyInstance): Promise<void> => {
    app.addHook('preClose', async () => {
      hub.close();
      for (const res of streams) res.end();
      streams.clear();
    });

    app.get('/dashboard', async (_request, reply) => {
      reply.headers(PAGE_HEADERS);
      return DASHBOARD_HTML;
    });

    app.get('/dashboard/data', async (_request, reply) => {
      reply.header('content-type', 'application/json; charset=utf-8').header('cache-control', 'no-store');
      return hub.poll();
    });

    // No HEAD route: a stream's head is only sent with its first byte of body, which a HEAD never has.
    app.get('/dashboard/events', { exposeHeadRoute: false }, (request, reply) => {
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-store, no-transform',
        connection: 'keep-alive',
        // Proxies such as nginx must pass the events on as they come.
        'x-accel-buffering': 'no',
        'x-request-id': request.id,
      });
      // The browser reconnects after 2 s when the stream drops.
      res.write('retry: 2000\n\n');
      streams.add(res);
      let skipped = 0;
      const unsubscribe = hub.subscribe((json) => {
        if (res.destroyed || res.writableEnded) return;
        // A slow client skips ticks rather than piling snapshots up in memory.
        if (res.writableNeedDrain) {
          if (++skipped >= MAX_SKIPPED_TICKS) res.destroy();
          return;
        }
        skipped = 0;
        res.write(`data: ${json}\n\n`);
      });
      res.on('close', () => {
        unsubscribe();
        streams.delete(res);
      });
    });
  };
}
