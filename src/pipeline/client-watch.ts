import { ClientDisconnected } from '../errors/http-errors.js';
import type { ApiReply } from './exchange.js';

/**
 * Aborts `controller` with ClientDisconnected when the client's connection closes before the
 * answer has ended, and returns it. Any controller will do: the chat hot path passes its cheap
 * Cancellation, the other routes an AbortController.
 */
export function abortWhenClientLeaves<C extends { abort(reason?: unknown): void }>(
  reply: Pick<ApiReply, 'raw'>,
  controller: C,
): C {
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) controller.abort(new ClientDisconnected());
  });
  return controller;
}
