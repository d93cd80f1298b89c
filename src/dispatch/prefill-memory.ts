import { LRUCache } from 'lru-cache';
import type { ModelSettings } from '../config/model-settings.js';

/** Models remembered at most: the oldest is forgotten past it (model names churn with discovery and LoRA). */
const MAX_MODELS = 1_024;
/**
 * How long a model is remembered for: its template may be fixed by a redeploy under the same
 * name, and one failed continuation an hour to find out costs little (lru-cache measures it on
 * the monotonic clock).
 */
const REMEMBER_MS = 60 * 60_000;

/**
 * Which models accept an assistant prefill, to continue a cut stream on: those not marked
 * `models.<m>.continuation: false`, less those whose engine refused one in a 400
 * (PrefillRejected), learnt as they answer and remembered per model, bounded and for a time.
 */
export class PrefillMemory {
  private readonly rejected = new LRUCache<string, true>({ max: MAX_MODELS, ttl: REMEMBER_MS });

  constructor(private readonly settings: ModelSettings) {}

  /** Whether a continuation may be sent to `model`. */
  accepts(model: string): boolean {
    return this.settings.continuation(model) && !this.rejected.has(model);
  }

  /** Remembers that `model`'s template refused a prefill; true when it was not known yet. */
  remember(model: string): boolean {
    const known = this.rejected.has(model);
    this.rejected.set(model, true);
    return !known;
  }
}
