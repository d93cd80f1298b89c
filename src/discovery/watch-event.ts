import { z } from 'zod';
import { type Pod, podSchema } from './pod.js';
import type { DiscoveryLogger } from './types.js';

const eventSchema = z.object({ type: z.string(), object: z.unknown() });
const statusSchema = z.object({
  code: z.number().nullish(),
  reason: z.string().nullish(),
  message: z.string().nullish(),
});
const bookmarkSchema = z.object({ metadata: z.object({ resourceVersion: z.string().min(1) }) });

/** What one line of a WATCH stream means for the watch. */
export type WatchEvent =
  | { kind: 'pod'; pod: Pod; deleted: boolean } // ADDED, MODIFIED or DELETED
  | { kind: 'bookmark'; resourceVersion: string }
  | { kind: 'skipped' } // nothing to apply; the watch goes on
  | { kind: 'gone' } // an ERROR event for an expired resourceVersion: LIST again
  | { kind: 'failed'; error: string }; // the stream is broken: resume the watch

/** Reads one line of a WATCH stream; warns about what it skips, except a malformed bookmark. */
export function parseWatchLine(line: string, log: DiscoveryLogger): WatchEvent {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    return { kind: 'failed', error: 'the watch stream sent a line that is not JSON' };
  }
  const event = eventSchema.safeParse(json);
  if (!event.success)
    return { kind: 'failed', error: 'the watch stream sent something that is not an event' };
  const { type, object } = event.data;
  switch (type) {
    case 'ADDED':
    case 'MODIFIED':
    case 'DELETED': {
      const pod = podSchema.safeParse(object);
      if (!pod.success) {
        log.warn({ type }, 'watch event without a pod; skipped');
        return { kind: 'skipped' };
      }
      return { kind: 'pod', pod: pod.data, deleted: type === 'DELETED' };
    }
    case 'BOOKMARK': {
      const bookmark = bookmarkSchema.safeParse(object);
      if (!bookmark.success) return { kind: 'skipped' };
      return { kind: 'bookmark', resourceVersion: bookmark.data.metadata.resourceVersion };
    }
    case 'ERROR': {
      const status = statusSchema.safeParse(object);
      const { code, reason, message } = status.success ? status.data : {};
      if (code === 410 || reason === 'Expired' || reason === 'Gone') return { kind: 'gone' };
      return { kind: 'failed', error: `watch ERROR event ${code ?? '?'} ${reason ?? ''}: ${message ?? ''}` };
    }
    default:
      log.warn({ type }, 'unknown watch event type; skipped');
      return { kind: 'skipped' };
  }
}
