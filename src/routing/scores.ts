/** The scorer policy's scores: each scorer's 0..1 score of each candidate, and what decided a pick. */
import { type CandidateView, loadOf, pendingPrefillOf } from './candidate-view.js';
import { SCORER_NAMES, type ScorerName, type ScorerWeights } from './types.js';

/** `1 - x / (max + 1)` for each value: 1 for none, lower the closer it is to the largest. */
export function fewerIsBetter(values: readonly number[]): number[] {
  let max = 0;
  for (const v of values) if (v > max) max = v;
  return values.map((v) => 1 - v / (max + 1));
}

/** `1 - x / scale` for each value, the scale raised to the largest value past it. */
export function lessIsBetter(values: readonly number[], scale: number): number[] {
  let max = scale;
  for (const v of values) if (v > max) max = v;
  return values.map((v) => (max > 0 ? 1 - v / max : 1));
}

/** The characters of a prompt a worker's cache likely lacks: those past the blocks it holds. */
export function uncachedChars(textChars: number, depth: number | undefined, blockChars: number): number {
  return Math.max(0, textChars - (depth ?? 0) * blockChars);
}

/** Per view: the prompt characters queued ahead of prefill there, plus this prompt's part its cache likely lacks. */
export function prefillWork(
  views: readonly CandidateView[],
  prefixDepth: ReadonlyMap<string, number>,
  blockChars: number,
  textChars: number,
): number[] {
  return views.map(
    (v) =>
      pendingPrefillOf(v.candidate) + uncachedChars(textChars, prefixDepth.get(v.candidate.id), blockChars),
  );
}

/** The scales of a decision's scores. */
export interface ScoreScales {
  /** The saturation bound of requests waiting (the queue score's scale). */
  readonly maxWaiting: number;
  /** Characters per prefix block. */
  readonly blockChars: number;
  /** The prompt's characters (0: unknown, the prefill scorer counts only the work queued ahead). */
  readonly textChars: number;
  /** The prefill score's scale in characters (the work that scores 0, or the most of any candidate past it). */
  readonly prefillChars: number;
}

/**
 * The prefill score's scale: about one engine step of prompt tokens (vLLM's 2048 batched tokens).
 */
export const PREFILL_SCALE_CHARS = 8192;

/**
 * Each scorer's 0..1 score of each view, in the views' order. The queue is scored against the
 * saturation bound (a worker past it is filtered out), so one request more or less waiting moves
 * the score by a step of that scale, not by the whole range; prefill work likewise against a
 * scale of characters (a few hundred characters more to prefill on one worker than on another
 * is nearly nothing, not the whole range); the gateway's own load against the largest of the
 * candidates'.
 */
export function scoreViews(
  views: readonly CandidateView[],
  prefixDepth: ReadonlyMap<string, number>,
  blocks: number,
  scales: ScoreScales,
): Record<ScorerName, number[]> {
  const { maxWaiting, blockChars, textChars, prefillChars } = scales;
  const known = views.flatMap((v) => (v.kvCacheUsage === undefined ? [] : [v.kvCacheUsage]));
  const meanKv = known.length > 0 ? known.reduce((a, b) => a + b, 0) / known.length : 0;
  return {
    prefix: views.map((v) => {
      const depth = prefixDepth.get(v.candidate.id) ?? 0;
      // Squared: a prefix that is a small part of the prompt (a short system prompt before a long
      // document) saves little and is held by many; one that is most of it (the turns of a
      // session) saves much. Linear shares herded a tenant's burst onto its system prompt's engines.
      const share = blocks > 0 ? depth / blocks : 0;
      return share * share;
    }),
    queue: views.map((v) => 1 - Math.min(1, v.waiting / (maxWaiting + 1))),
    kvCache: views.map((v) => 1 - (v.kvCacheUsage ?? meanKv)),
    lora: views.map((v) => (v.lora === 'loaded' ? 1 : 0)),
    inflight: fewerIsBetter(views.map((v) => loadOf(v.candidate))),
    prefill: lessIsBetter(prefillWork(views, prefixDepth, blockChars, textChars), prefillChars),
  };
}

/** The scorer that set the winner apart from the runner-up most, or how it was chosen otherwise. */
export function decidedBy(
  count: number,
  tied: number,
  winner: number,
  runnerUp: number | undefined,
  scores: Record<ScorerName, number[]>,
  weights: ScorerWeights,
): string {
  if (count === 1 || runnerUp === undefined) return 'only_candidate';
  if (tied > 1) return 'random_tie';
  let best: ScorerName = SCORER_NAMES[0];
  let most = Number.NEGATIVE_INFINITY;
  for (const name of SCORER_NAMES) {
    const lead = weights[name] * (scores[name][winner]! - scores[name][runnerUp]!);
    if (lead > most) {
      most = lead;
      best = name;
    }
  }
  return best;
}

export function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}
