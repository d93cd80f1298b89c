import { InvalidJson } from '../errors/request-errors.js';

/** How deeply a request body's arrays and objects may nest. */
export const MAX_JSON_DEPTH = 128;

/**
 * Whether a parsed JSON value nests arrays and objects deeper than `limit`. It walks the values,
 * not the text: a chat request is a few objects around long strings, and scanning every
 * character of its text cost more than parsing it.
 */
export function nestedDeeperThan(value: unknown, limit: number): boolean {
  if (typeof value !== 'object' || value === null) return false;
  if (limit === 0) return true;
  if (Array.isArray(value)) {
    for (const item of value) if (nestedDeeperThan(item, limit - 1)) return true;
    return false;
  }
  const record = value as Record<string, unknown>;
  for (const key in record) if (nestedDeeperThan(record[key], limit - 1)) return true;
  return false;
}

/**
 * Parses an `application/json` request body: plain JSON.parse (the body is only read and
 * forwarded, never merged into other objects, so a prototype-poisoning scan buys nothing), then
 * a bound on its nesting (deeper, serializing it again for the engine would overflow the stack).
 * A syntax error is thrown as JSON.parse's SyntaxError, marked 400 (toSluiceError words it).
 */
export function parseJsonBody(text: string, method: string): unknown {
  // A DELETE or GET sent with a JSON content type and nothing in it has no body, not a bad one.
  if (text.length === 0 && (method === 'DELETE' || method === 'GET')) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    (err as { statusCode?: number }).statusCode = 400;
    throw err;
  }
  if (nestedDeeperThan(parsed, MAX_JSON_DEPTH)) {
    throw new InvalidJson(
      `The request body is not valid JSON: it is nested more than ${MAX_JSON_DEPTH} levels deep.`,
    );
  }
  return parsed;
}
