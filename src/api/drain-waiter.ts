import type { Writable } from 'node:stream';

/**
 * Waits for `dest` to drain, one wait at a time: a relay may have several writes refused before
 * the first 'drain' (the events held before a stream is handed over are replayed in one go, and a
 * Responses chunk makes several events), and one listener per refused write piles up. Each call
 * asks for `resume` to run at the next 'drain'; only the latest call's runs (they all resume the
 * same stream).
 */
export function drainWaiter(dest: Pick<Writable, 'once'>): (resume: () => void) => void {
  let pending: (() => void) | undefined;
  const drained = () => {
    const resume = pending;
    pending = undefined;
    resume?.();
  };
  return (resume) => {
    if (pending === undefined) dest.once('drain', drained);
    pending = resume;
  };
}
