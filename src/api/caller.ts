import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Caller } from '../responses/ownership.js';
import type { GatewayContext } from './context.js';

/** The API key each admitted request came with (null: the gateway runs open). */
const callers = new WeakMap<FastifyRequest, Caller>();

/** Admits a request that reads or changes stored objects (no tokens spent) and remembers its key. */
export async function admitCaller(
  ctx: GatewayContext,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  const grant = await ctx.access.admit(request, reply, undefined, false);
  callers.set(request, grant?.key.id ?? null);
}

/** The caller of an admitted request; a route that was not admitted is a bug, never an open door. */
export function callerOf(request: FastifyRequest): Caller {
  const caller = callers.get(request);
  if (caller === undefined) throw new Error(`request ${request.id} was not admitted`);
  return caller;
}
