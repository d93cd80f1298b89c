import type { z } from 'zod';
import { InvalidBody, InvalidValue, MissingParameter } from '../errors/request-errors.js';

/** `messages[0].content` from a zod path. */
export function formatParam(path: readonly PropertyKey[]): string | null {
  if (path.length === 0) return null;
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out.length === 0 ? String(key) : `.${String(key)}`;
  }
  return out;
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let node = root;
  for (const key of path) {
    if (typeof node !== 'object' || node === null) return undefined;
    node = (node as Record<PropertyKey, unknown>)[key];
  }
  return node;
}

/** Parses a request body with `schema`, turning the first problem into an OpenAI-shaped 400. */
export function validateBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new InvalidBody('The request body must be a JSON object.');
  }
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const param = formatParam(issue.path);
  const missing = valueAt(body, issue.path) === undefined;
  const message = missing
    ? `Missing required parameter: '${param}'.`
    : `Invalid value for '${param ?? 'body'}': ${issue.message}`;
  throw missing ? new MissingParameter(message, param) : new InvalidValue(message, param);
}
