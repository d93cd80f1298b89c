import type { RandomSource } from './types.js';

/** A uniform index in [0, n), clamped so that a source returning exactly 1 stays in range. */
export function randomIndex(random: RandomSource, n: number): number {
  return Math.min(n - 1, Math.floor(random() * n));
}
