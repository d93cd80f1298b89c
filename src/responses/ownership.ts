/**
 * Who may see a stored response or conversation. Each one records the API key that created it;
 * a caller with another key gets a 404, exactly as for an id that does not exist (so ids cannot
 * be probed). An open gateway (no key exists, so no caller key) sees everything.
 *
 * Objects made while the gateway ran open belong to no key. Once keys exist, no key may read
 * them: anyone could have written them (a key created later would otherwise read every prompt
 * sent before it, and chain onto them), so the safe choice is that they are nobody's until the
 * gateway runs open again.
 */
export type Caller = string | null;

export function visibleTo(owner: string | null, caller: Caller): boolean {
  return caller === null || owner === caller;
}
