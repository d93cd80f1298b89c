import type { RunEnd } from './response-run.js';

/** How a response ended: its final object and terminal event, as shown and stored. */
export interface Terminal {
  json: string;
  eventJson: string;
  type: string;
  status: string;
  /** How its run ended (a failure's error, for counting). */
  end: RunEnd;
}

/** A response that has not ended yet; every other status is final. */
export function isUnfinished(status: string): boolean {
  return status === 'queued' || status === 'in_progress';
}
