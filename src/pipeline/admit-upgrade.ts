import {
  ConnectionCapacityReached,
  OriginNotAllowed,
  TooManyConnections,
} from '../errors/websocket-errors.js';
import type { PipelineContext } from './context.js';

/**
 * The phase a WebSocket upgrade begins with, before any `response.create` on it runs the request
 * pipeline: the transport's checks in order (its origin, the caller's key, a connection slot),
 * the first refusal thrown as it is and counted by its reason. A refused key is counted where
 * every refused key is (admission), not as a WebSocket refusal.
 */
export async function admitUpgrade(
  ctx: PipelineContext,
  checks: readonly (() => void | Promise<void>)[],
): Promise<void> {
  try {
    for (const check of checks) await check();
  } catch (err) {
    const reason = refusalReason(err);
    if (reason !== undefined) ctx.metrics.websocketRefusals.inc({ reason });
    throw err;
  }
}

function refusalReason(err: unknown): string | undefined {
  if (err instanceof OriginNotAllowed) return 'origin';
  if (err instanceof TooManyConnections) return 'client_connections';
  if (err instanceof ConnectionCapacityReached) return 'connections';
  return undefined;
}
