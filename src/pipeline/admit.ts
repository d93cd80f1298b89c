import type { IncomingHttpHeaders } from 'node:http';
import type { Grant } from '../auth/access-control.js';
import { GatewayShuttingDown } from '../errors/http-errors.js';
import type { PipelineContext } from './context.js';

/**
 * The phase every generating request begins with, on every front and transport: refused while
 * the gateway drains, then admitted (its key, the model it names, its budget and rate limits).
 * Who is asking comes first: an unknown client learns nothing about the request's validity. An
 * open gateway admits without a turn of the event loop (the hot path of most deployments).
 */
export function admitRequest(
  ctx: PipelineContext,
  request: { readonly headers: IncomingHttpHeaders; readonly body?: unknown },
  answering: { readonly raw: { setHeader(name: string, value: string): unknown } },
  credential?: string,
): Promise<Grant | undefined> | undefined {
  if (ctx.lifecycle.draining) throw new GatewayShuttingDown();
  return ctx.access.open ? undefined : ctx.access.admitBody(request, answering, true, credential);
}
