import { randomBytes } from 'node:crypto';

/** Ids shaped like OpenAI's: a type prefix and 48 hex characters (`resp_…`, `msg_…`, `fc_…`). */
export function newId(
  prefix: 'resp' | 'msg' | 'fc' | 'rs' | 'call' | 'conv' | 'item' | 'fco' | 'cmp' | 'mcp' | 'mcpl' | 'mcpr',
): string {
  return `${prefix}_${randomBytes(24).toString('hex')}`;
}
