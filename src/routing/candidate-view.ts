/** How the scorer policy sees one candidate: its engine's reading, and what the gateway replicas count there. */
import type { Candidate, CandidateReading, SaturationOptions } from './types.js';

export type LoraState = 'loaded' | 'free' | 'full' | 'unknown';

/** What the scorer reads of one candidate, once per decision. */
export interface CandidateView {
  readonly candidate: Candidate;
  readonly state: CandidateReading['state'];
  /** Requests waiting on its engine, with what this gateway sent since the engine was read. */
  readonly waiting: number;
  /** Whether its engine's batch has no room left: a request sent there now waits in its queue. */
  readonly full?: boolean;
  readonly kvCacheUsage: number | undefined;
  readonly lora: LoraState;
}

/**
 * Why a view is saturated by what its engine reported (or failed to report), or undefined when
 * it is not: the filter of a pick.
 */
export function saturation(view: CandidateView, options: SaturationOptions): string | undefined {
  if (view.state === 'stale') return 'stale';
  if (view.waiting > options.maxWaiting) return 'waiting';
  if (view.kvCacheUsage !== undefined && view.kvCacheUsage > options.maxKvCacheUsage) return 'kv_cache';
  return undefined;
}

/**
 * Why a request should not go to a view now: saturated, or its batch full with `maxWaiting`
 * waiting already (so that no more than `maxWaiting` wait in an engine because of this gateway).
 * What flow control judges; a pick filters only on `saturation` (see `select`).
 */
export function holdReason(view: CandidateView, options: SaturationOptions): string | undefined {
  const why = saturation(view, options);
  if (why !== undefined) return why;
  // The request itself counted: sent to a full batch, it would be one waiting more, past the bound.
  if (view.full && view.waiting >= options.maxWaiting) return 'waiting';
  return undefined;
}

/** Whether an engine has `adapter` loaded, a free adapter slot, neither, or does not say. */
export function loraState(reading: CandidateReading, adapter: string): LoraState {
  const lora = reading.state === 'stale' ? undefined : reading.signals?.lora;
  if (lora === undefined) return 'unknown';
  if (lora.running.includes(adapter) || lora.waiting.includes(adapter)) return 'loaded';
  return lora.running.length < lora.max ? 'free' : 'full';
}

/** Requests on a candidate from every gateway replica: this one's and the others' (Candidate.elsewhere). */
export function loadOf(c: Pick<Candidate, 'load' | 'elsewhere'>): number {
  return c.elsewhere === undefined ? c.load : c.load + c.elsewhere.load;
}

/** Pending prefill on a candidate from every gateway replica. */
export function pendingPrefillOf(c: Candidate): number {
  const own = c.pendingPrefill ?? 0;
  return c.elsewhere === undefined ? own : own + c.elsewhere.pendingPrefill;
}

/**
 * The adapter a request asks for: its model, when some candidate lists it as an adapter on
 * `/v1/models` or its engine reports requests using it (`readings[i]` is `candidates[i]`'s).
 */
export function adapterIn(
  candidates: readonly Candidate[],
  readings: readonly CandidateReading[],
  model: string | undefined,
): string | undefined {
  if (model === undefined) return undefined;
  for (let i = 0; i < candidates.length; i++) {
    if (candidates[i]!.adapters?.has(model)) return model;
    const lora = readings[i]!.signals?.lora;
    if (lora && (lora.running.includes(model) || lora.waiting.includes(model))) return model;
  }
  return undefined;
}

/** A candidate's reading now; one without signals is read from its own count as missing. */
export function readingOf(c: Candidate, now: number): CandidateReading {
  return (
    c.signals?.(now) ?? {
      state: 'missing',
      signals: { waiting: 0, running: loadOf(c), kvCacheUsage: undefined, lora: undefined, scrapedAt: now },
    }
  );
}
