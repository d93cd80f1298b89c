import {
  assertValidLimits,
  assertValidTokenCount,
  type Decision,
  isUnlimited,
  type RateLimiter,
  type RateLimits,
} from './rate-limiter.js';
import { type BucketState, canAdmit, type Levels, levelAt, toDecision } from './token-bucket.js';

interface KeyBuckets {
  requests?: BucketState;
  tokens?: BucketState;
}

/**
 * The limiter of a single gateway process: buckets live in a Map (one small entry per key id
 * seen; ids come from the key store, so the map is as bounded as the set of keys). With several
 * replicas each would enforce the full limit on its own share: use RedisRateLimiter there.
 */
export class MemoryRateLimiter implements RateLimiter {
  private readonly buckets = new Map<string, KeyBuckets>();

  async check(keyId: string, limits: RateLimits, now = Date.now()): Promise<Decision> {
    assertValidLimits(limits);
    if (isUnlimited(limits)) return toDecision(limits, { requests: null, tokens: null }, true);
    const buckets = this.bucketsOf(keyId);
    const levels: Levels = {
      requests: limits.rpm === null ? null : levelAt(buckets.requests, limits.rpm, now),
      tokens: limits.tpm === null ? null : levelAt(buckets.tokens, limits.tpm, now),
    };
    const allowed = canAdmit(levels);
    if (allowed && levels.requests !== null) {
      levels.requests -= 1;
      buckets.requests = { tokens: levels.requests, updatedMs: now };
    }
    return toDecision(limits, levels, allowed);
  }

  async consumeTokens(keyId: string, limits: RateLimits, tokens: number, now = Date.now()): Promise<void> {
    assertValidLimits(limits);
    assertValidTokenCount(tokens);
    if (limits.tpm === null || tokens === 0) return;
    const buckets = this.bucketsOf(keyId);
    buckets.tokens = { tokens: levelAt(buckets.tokens, limits.tpm, now) - tokens, updatedMs: now };
  }

  async close(): Promise<void> {
    this.buckets.clear();
  }

  private bucketsOf(keyId: string): KeyBuckets {
    let buckets = this.buckets.get(keyId);
    if (buckets === undefined) {
      buckets = {};
      this.buckets.set(keyId, buckets);
    }
    return buckets;
  }
}
