import { InvalidCompactionItem } from '../errors/request-content-errors.js';

/** The compaction item's content: what `POST /v1/responses/compact` makes and a later request reads back. */

/**
 * sluice does not encrypt: a compaction item's `encrypted_content` is this prefix then the
 * summary's UTF-8 text in base64. Opaque to clients, as the specification wants; readable by
 * any sluice, which expands it into a user message carrying the summary.
 */
const CONTENT_PREFIX = 'sluice.compaction.v1.';

export function encodeCompaction(summary: string): string {
  return CONTENT_PREFIX + Buffer.from(summary, 'utf8').toString('base64');
}

/** The summary a compaction item carries; a 400 when this gateway did not make it. */
export function decodeCompaction(content: unknown): string {
  if (typeof content !== 'string' || !content.startsWith(CONTENT_PREFIX)) {
    throw new InvalidCompactionItem();
  }
  return Buffer.from(content.slice(CONTENT_PREFIX.length), 'base64').toString('utf8');
}

/** The user message a compaction item becomes for the engine. */
export function compactionMessage(content: unknown): string {
  return `Summary of the earlier conversation (compacted):\n${decodeCompaction(content)}`;
}
