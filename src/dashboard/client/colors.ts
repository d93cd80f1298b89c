/** One colour per model, kept for the life of the page (the same model keeps its colour). */
import type { DashboardSnapshot } from './snapshot.js';

const PALETTE = ['#3b6fe0', '#d6336c', '#12a37a', '#e08a1e', '#7c4ddb', '#0b93b5', '#c2410c', '#5f9e1d'];
const colors = new Map<string, string>();

/** Gives the models of a snapshot not seen before the next colours, in name order. */
export function assignColors(s: DashboardSnapshot): void {
  const names = s.models.map((m) => m.model).concat(s.series.models.map((m) => m.model));
  names.sort();
  for (const name of names) {
    if (!colors.has(name)) colors.set(name, PALETTE[colors.size % PALETTE.length]!);
  }
}

export function colorOf(model: string): string {
  return colors.get(model) || '#667085';
}
