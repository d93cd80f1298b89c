import type { Writable } from 'node:stream';

/**
 * Waits for `dest` to drain, one wait at a time: a relay may have several writes refused before
 * the first 'drain' (the events held before a stream is handed over are replayed in one go, and a
 * Responses chunk makes several events), and one listener per refused write piles up. Each call
 * asks for `resume` to run at the next 'drain'; only the latest call's runs (they all resume the
 * same stream).
 *
 * A `dest` that closes first (the client went away) never drains: the wait is dropped then, with
 * its listener. Left on the response, it would keep the paused stream, and everything its
 * consumer built (a Responses run's whole text), alive for as long as anything holds the
 * response (its socket's timers, a half-closed connection).
 */
export function drainWaiter(dest: Pick<Writable, 'once' | 'off'>): (resume: () => void) => void {
  let pending: (() => void) | undefined;
  let closed = false;
  const drained = () => {
    dest.off('close', forget);
    const resume = pending;
    pending = undefined;
    resume?.();
  };
  const forget = () => {
    closed = true;
    dest.off('drain', drained);
    pending = undefined;
  };
  return (resume) => {
    if (closed) return;
    if (pending === undefined) {
      dest.once('drain', drained);
      dest.once('close', forget);
    }
    pending = resume;
  };
}
