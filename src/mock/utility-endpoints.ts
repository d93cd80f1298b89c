import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody, send, sendError } from './http-io.js';
import type { WorkerState } from './worker-state.js';

/** The endpoints beside generation: health, the model list, vLLM's utility calls, and the mock's own stats and fault. */

/** `GET /health`: vLLM answers an empty 200; 503 while the worker is set unhealthy. */
export function health(res: ServerResponse, state: WorkerState): void {
  if (state.healthy) res.writeHead(200, { 'content-length': '0' }).end();
  else sendError(res, 503, 'unhealthy (sluice mock)');
}

/**
 * `GET /v1/models`, with `max_model_len` when one is set (as vLLM reports it), then the LoRA
 * adapters served, each with its base model as `parent` (as vLLM lists them).
 */
export function listModels(
  res: ServerResponse,
  models: readonly string[],
  maxModelLen: number | undefined,
  adapters: readonly string[] = [],
): void {
  const created = Math.floor(Date.now() / 1000);
  const data = [...models, ...adapters].map((id, i) => ({
    id,
    object: 'model',
    created,
    owned_by: 'sluice-mock',
    ...(i < models.length ? {} : { root: `/adapters/${id}`, parent: models[0] }),
    ...(maxModelLen === undefined ? {} : { max_model_len: maxModelLen }),
  }));
  send(res, 200, JSON.stringify({ object: 'list', data }));
}

/** `GET /mock/stats`. */
export function showStats(res: ServerResponse, state: WorkerState): void {
  send(res, 200, JSON.stringify(state.stats));
}

/** `POST /mock/fault {"fault": "<spec>"}` sets (or, with null, clears) the worker-wide fault. */
export async function setWorkerFault(
  req: IncomingMessage,
  res: ServerResponse,
  state: WorkerState,
): Promise<void> {
  let fault: unknown;
  try {
    fault = (JSON.parse((await readBody(req)) || '{}') as { fault?: unknown } | null)?.fault;
  } catch {
    return sendError(res, 400, 'the body is not JSON; expected {"fault": "<spec>"}');
  }
  if (fault !== undefined && fault !== null && typeof fault !== 'string') {
    return sendError(res, 400, '`fault` must be a string or null');
  }
  try {
    state.setFault(fault ?? undefined);
  } catch (err) {
    return sendError(res, 400, (err as Error).message);
  }
  return send(res, 200, JSON.stringify({ fault: state.faultSpec ?? null }));
}

/**
 * One of vLLM's utility calls (`POST /flush_cache`, `GET /is_sleeping`, ...): counted, then
 * answered by `answer` unless the worker's utility fault fails it, garbles it or never answers.
 */
export function utilityCall(
  route: string,
  res: ServerResponse,
  state: WorkerState,
  answer: () => string,
): void {
  state.utilityCall(route);
  const utilityFault = state.utilityFault;
  if (utilityFault === 'hang') return; // never answers; the socket stays open until closed
  if (utilityFault === 'http_500') sendError(res, 500, 'utility call failed (sluice mock)');
  else if (utilityFault === 'garbage') send(res, 200, '<<<not json>>>');
  else send(res, 200, answer());
}
