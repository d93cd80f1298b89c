import type { SluiceError } from '../errors/base.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { ApiName } from '../observability/metrics.js';
import type { GatewayContext } from './context.js';
import { toSluiceError } from './error-handler.js';
import type { ApiReply } from './exchange.js';
import type { RequestObserver } from './request-observer.js';

/**
 * How a generation route ends a request that threw. A client that went away is logged and
 * counted as 499 `client_gone` and its socket closed (nobody is left to answer); anything else is
 * logged with its status and stable code, then rethrown for the route's error handler to answer
 * in its API's shape (`statusOf` gives the status that shape uses).
 */
export function endFailedRequest(
  ctx: GatewayContext,
  api: ApiName,
  observer: RequestObserver,
  reply: Pick<ApiReply, 'raw' | 'sent' | 'hijack'>,
  err: unknown,
  statusOf: (error: SluiceError) => number = (error) => error.status,
): void {
  const error = toSluiceError(err, ctx.config.server.bodyLimitBytes);
  if (error instanceof ClientDisconnected) {
    ctx.metrics.clientGone(api, observer.model);
    observer.finish(499, 'client_gone');
    if (!reply.sent) reply.hijack();
    reply.raw.destroy();
    return;
  }
  observer.finish(statusOf(error), 'error', { code: error.code });
  throw error;
}
