import { z } from 'zod';
import { UnknownCursor } from '../errors/request-content-errors.js';
import { InvalidValue } from '../errors/request-errors.js';
import type { PageRequest } from '../storage/types.js';

export const pageQuerySchema = z.looseObject({
  after: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(100).optional(),
  order: z.enum(['asc', 'desc']).optional(),
});

/** Reads `after`, `limit` (1..100, default 20) and `order` (default desc) from a query string. */
export function pageRequest(query: unknown): PageRequest {
  const result = pageQuerySchema.safeParse(query ?? {});
  if (!result.success) {
    const issue = result.error.issues[0]!;
    const param = String(issue.path[0] ?? 'query');
    throw new InvalidValue(`Invalid value for '${param}': ${issue.message}`, param);
  }
  return { after: result.data.after, limit: result.data.limit ?? 20, order: result.data.order ?? 'desc' };
}

/**
 * Pages through items held in memory, the same way the stores page through theirs. An `after`
 * that names no item of the list is a 400 `cursor_not_found` (never an empty page: a client
 * paging with a cursor it mistyped would take it for the end of the list).
 */
export function pageOf<T extends { id: string }>(
  items: readonly T[],
  page: PageRequest,
): { data: T[]; hasMore: boolean } {
  const ordered = page.order === 'asc' ? items : [...items].reverse();
  let start = 0;
  if (page.after !== undefined) {
    const index = ordered.findIndex((item) => item.id === page.after);
    if (index < 0) throw new UnknownCursor(page.after);
    start = index + 1;
  }
  const data = ordered.slice(start, start + page.limit);
  return { data, hasMore: start + page.limit < ordered.length };
}

export function listObject<T extends { id: string }>(page: { data: T[]; hasMore: boolean }) {
  return {
    object: 'list' as const,
    data: page.data,
    first_id: page.data[0]?.id ?? null,
    last_id: page.data.at(-1)?.id ?? null,
    has_more: page.hasMore,
  };
}
