const WHITESPACE = new Set([' ', '\t', '\n', '\r']);

/**
 * A body with its `priority` set (vLLM's and SGLang's field: lower goes first in an engine that
 * schedules by priority), replacing any the client sent: the gateway's fairness is not the
 * client's to forge.
 *
 * The usual body (a front's `JSON.stringify` of an object that has no `"priority"` anywhere) gets
 * the field added before its closing brace, not parsed again; any other is parsed and written
 * anew.
 */
export function withPriority(payload: string, priority: number): string {
  const end = payload.length - 1;
  if (payload[0] === '{' && payload[end] === '}' && !payload.includes('"priority"')) {
    let last = end - 1;
    while (last > 0 && WHITESPACE.has(payload[last]!)) last--;
    return `${payload.slice(0, end)}${last === 0 ? '' : ','}"priority":${priority}}`;
  }
  const body = JSON.parse(payload) as Record<string, unknown>;
  body.priority = priority;
  return JSON.stringify(body);
}
