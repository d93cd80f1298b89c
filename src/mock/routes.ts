import type { IncomingMessage, ServerResponse } from 'node:http';
import { generate } from './generation-endpoint.js';
import { send, sendError } from './http-io.js';
import { POOLING_ROUTES, poolingEndpoint } from './pooling-endpoints.js';
import { health, listModels, setWorkerFault, showStats, utilityCall } from './utility-endpoints.js';
import type { WorkerSettings } from './worker-settings.js';
import type { WorkerState } from './worker-state.js';

/** The mock server's routing: `METHOD /path` (the query left out) to its endpoint; 404 for the rest. */
export function mockRoutes(
  settings: WorkerSettings,
  state: WorkerState,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const route = `${req.method} ${q < 0 ? url : url.slice(0, q)}`;
    switch (route) {
      case 'POST /v1/chat/completions':
        return generate(req, res, 'chat', settings, state);
      case 'POST /v1/completions':
        return generate(req, res, 'completions', settings, state);
      case 'GET /health':
        return health(res, state);
      case 'GET /v1/models':
        return listModels(res, settings.models, settings.maxModelLen, settings.engine?.adapters);
      case 'GET /metrics':
        // vLLM's names, from the engine model; a worker without one has no /metrics.
        if (!settings.engine) return sendError(res, 404, `Not Found: ${route}`);
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
        return void res.end(settings.engine.metrics.render());
      case 'GET /mock/stats':
        return showStats(res, state);
      case 'GET /mock/engine':
        // The engine model's own counters (engine-model.ts's EngineStats), beside its /metrics.
        if (!settings.engine) return sendError(res, 404, `Not Found: ${route}`);
        return send(res, 200, JSON.stringify(settings.engine.model.stats));
      case 'GET /mock/engine/requests':
        // The requests with `x-mock-trace-id` that ended since the last call (engine-run.ts).
        if (!settings.engine) return sendError(res, 404, `Not Found: ${route}`);
        return send(res, 200, JSON.stringify(settings.engine.takeTraced()));
      case 'POST /mock/fault':
        return setWorkerFault(req, res, state);
      case 'POST /flush_cache':
      case 'POST /reset_prefix_cache':
        return utilityCall(route, res, state, () => {
          settings.engine?.model.resetPrefixCache();
          return '{}';
        });
      case 'GET /is_sleeping':
        return utilityCall(route, res, state, () => JSON.stringify({ is_sleeping: state.sleeping }));
      case 'POST /sleep':
        return utilityCall(route, res, state, () => {
          state.sleeping = true;
          return '{}';
        });
      case 'POST /wake_up':
        return utilityCall(route, res, state, () => {
          state.sleeping = false;
          return '{}';
        });
      default:
        if (POOLING_ROUTES.has(route)) return poolingEndpoint(route, req, res, settings, state);
        return sendError(res, 404, `Not Found: ${route}`);
    }
  };
}

export type { WorkerSettings } from './worker-settings.js';
