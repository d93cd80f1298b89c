import { InvalidRequest } from '../errors/http-errors.js';

/** How deeply a request body's arrays and objects may nest. */
export const MAX_JSON_DEPTH = 128;

/** Whether the JSON `text` (already known to parse) nests arrays and objects deeper than `limit`. */
export function nestedDeeperThan(text: string, limit: number): boolean {
  // Nesting deeper than `limit` takes more than 2 * limit brackets.
  if (text.length <= 2 * limit) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92)
        i++; // a backslash escapes the next character
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 || c === 91) {
      if (++depth > limit) return true;
    } else if (c === 125 || c === 93) depth--;
  }
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
  if (nestedDeeperThan(text, MAX_JSON_DEPTH)) {
    throw new InvalidRequest(
      `The request body is not valid JSON: it is nested more than ${MAX_JSON_DEPTH} levels deep.`,
      null,
      'invalid_json',
    );
  }
  return parsed;
}
