import type { Candidate } from './types.js';

/**
 * A candidate with the lowest load. Among equally loaded ones it takes the `turn`-th (mod their
 * count), so that callers passing a rotating counter spread ties evenly instead of favouring one.
 */
export function leastLoaded<T extends Candidate>(candidates: readonly T[], turn: number): T {
  let min = Number.POSITIVE_INFINITY;
  let ties = 0;
  for (const c of candidates) {
    if (c.load < min) {
      min = c.load;
      ties = 1;
    } else if (c.load === min) {
      ties++;
    }
  }
  let skip = turn % ties;
  for (const c of candidates) {
    if (c.load === min && skip-- === 0) return c;
  }
  return candidates[0]!;
}
