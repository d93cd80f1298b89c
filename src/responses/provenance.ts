/**
 * Which items the gateway made itself (an engine turn's output), as opposed to items a client sent
 * (`input`, or added to a conversation): marked where they are made or read back from a stored
 * response's output, so that an `mcp_approval_response` can only answer a request the gateway
 * made. Items are marked by identity; a copy is not marked.
 */
const made = new WeakSet<object>();

export function markMade(items: Iterable<object>): void {
  for (const item of items) made.add(item);
}

export function madeByGateway(item: object): boolean {
  return made.has(item);
}
