/**
 * Who may see a stored response or conversation. Each one records the API key that created it;
 * a caller with another key gets a 404, exactly as for an id that does not exist (so ids cannot
 * be probed). Objects made while the gateway ran open (no owner) are visible to every caller, and
 * an open gateway (no caller key) sees everything.
 */
export type Caller = string | null;

export function visibleTo(owner: string | null, caller: Caller): boolean {
  return owner === null || caller === null || owner === caller;
}
