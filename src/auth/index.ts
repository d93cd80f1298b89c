export {
  type CreatedKey,
  type CreateKeyInput,
  type KeyRecord,
  KeyService,
  type KeyServiceOptions,
  type KeyUsage,
  keyAllowsModel,
  type TokenCounts,
} from './api-keys.js';
export * from './errors.js';
export { bearerToken, generateSecret, hashSecret, isWellFormedSecret, keyPrefix } from './key-secret.js';
export { MemoryRateLimiter } from './memory-rate-limiter.js';
export { formatRateLimitHeaders, formatResetDuration } from './rate-limit-headers.js';
export type { Decision, RateLimiter, RateLimits } from './rate-limiter.js';
export {
  RedisRateLimiter,
  type RedisRateLimiterOptions,
  type RedisRateLimiterStats,
  type WarningLogger,
} from './redis-rate-limiter.js';
