import type { Page, PageRequest } from './types.js';

/** SQL fragments for walking `seq` in a page's order; `after` is exclusive in that order. */
export const SEQ_ORDER: Record<PageRequest['order'], { direction: 'ASC' | 'DESC'; beyond: '>' | '<' }> = {
  asc: { direction: 'ASC', beyond: '>' },
  desc: { direction: 'DESC', beyond: '<' },
};

/** Builds a page from rows fetched with `LIMIT limit + 1`: the extra row only tells that more exist. */
export function toPage<T>(rows: T[], limit: number): Page<T> {
  return { data: rows.slice(0, limit), hasMore: rows.length > limit };
}
