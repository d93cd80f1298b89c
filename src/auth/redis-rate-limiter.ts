import { Redis, type RedisOptions } from 'ioredis';
import { RateLimiterUnavailable } from '../errors/auth-errors.js';
import { parseScriptReply, RATE_LIMIT_LUA } from './rate-limit-script.js';
import {
  assertValidLimits,
  assertValidTokenCount,
  type Decision,
  isUnlimited,
  type RateLimiter,
  type RateLimits,
} from './rate-limiter.js';
import { toDecision, unknownDecision } from './token-bucket.js';

/** Anything with pino's `warn(object, message)`. */
export interface WarningLogger {
  warn(details: object, message: string): void;
}

export interface RedisRateLimiterOptions {
  /** `redis://…`; default 127.0.0.1:6379 (or what `redisOptions` says). */
  url?: string | undefined;
  /** When Redis cannot answer: admit (true, the default) or throw RateLimiterUnavailable (503). */
  failOpen?: boolean | undefined;
  /** Prefix of the bucket keys, default `sluice:rl:` (keys `<prefix><keyId>:req` and `:tok`). */
  keyPrefix?: string | undefined;
  /** How long one call may wait for Redis, in ms (default 250). */
  commandTimeoutMs?: number | undefined;
  /** Outages are logged here at most once per `warningIntervalMs` (default 10 s), with a count. */
  logger?: WarningLogger | undefined;
  warningIntervalMs?: number | undefined;
  /** Extra ioredis options; they override the defaults chosen here. */
  redisOptions?: RedisOptions | undefined;
}

/** How often each outcome happened since the limiter was created. */
export interface RedisRateLimiterStats {
  /** Checks admitted without Redis (failOpen). */
  failedOpen: number;
  /** Checks refused with RateLimiterUnavailable (failOpen false). */
  failedClosed: number;
  /** Token deductions lost to an outage. */
  lostConsumes: number;
}

const COMMAND = 'sluiceRateLimit';

interface RateLimitCommand {
  [COMMAND](
    requestKey: string,
    tokenKey: string,
    rpm: number,
    tpm: number,
    admit: '0' | '1',
    spendTokens: number,
  ): Promise<unknown>;
}

const consoleLogger: WarningLogger = { warn: (details, message) => console.warn(message, details) };

/**
 * The limiter shared by every gateway replica: the buckets live in Redis and each call runs one
 * Lua script (EVALSHA through ioredis' defineCommand), so a key's limit holds exactly across
 * replicas. It never hangs on Redis: no offline queue (a call while disconnected fails at once),
 * a command timeout, one retry at most; ioredis keeps reconnecting in the background. While
 * Redis cannot answer, checks fail open (admitted, logged, counted) unless `failOpen` is false.
 * `now` arguments are ignored: the script uses the Redis server's clock.
 */
export class RedisRateLimiter implements RateLimiter {
  private readonly redis: Redis & RateLimitCommand;
  private readonly prefix: string;
  private readonly failOpen: boolean;
  private readonly logger: WarningLogger;
  private readonly warningIntervalMs: number;
  private readonly counts: RedisRateLimiterStats = { failedOpen: 0, failedClosed: 0, lostConsumes: 0 };
  private lastWarningAt = Number.NEGATIVE_INFINITY;
  private unreportedFailures = 0;

  constructor(options: RedisRateLimiterOptions = {}) {
    this.prefix = options.keyPrefix ?? 'sluice:rl:';
    this.failOpen = options.failOpen ?? true;
    this.logger = options.logger ?? consoleLogger;
    this.warningIntervalMs = options.warningIntervalMs ?? 10_000;
    const redisOptions: RedisOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      commandTimeout: options.commandTimeoutMs ?? 250,
      connectTimeout: 1000,
      ...options.redisOptions,
    };
    const redis = options.url === undefined ? new Redis(redisOptions) : new Redis(options.url, redisOptions);
    redis.defineCommand(COMMAND, { numberOfKeys: 2, lua: RATE_LIMIT_LUA });
    // Without a listener ioredis prints every failed reconnection attempt.
    redis.on('error', (err: unknown) => this.reportFailure(err));
    this.redis = redis as Redis & RateLimitCommand;
  }

  /**
   * Connects now rather than on first use (a call made before the connection is up fails like an
   * outage). Rejects when Redis is unreachable; reconnection continues in the background.
   */
  async connect(): Promise<void> {
    if (this.redis.status === 'wait') await this.redis.connect();
  }

  get stats(): Readonly<RedisRateLimiterStats> {
    return { ...this.counts };
  }

  async check(keyId: string, limits: RateLimits): Promise<Decision> {
    assertValidLimits(limits);
    if (isUnlimited(limits)) return toDecision(limits, { requests: null, tokens: null }, true);
    let reply: unknown;
    try {
      reply = await this.run(keyId, limits, '1', 0);
    } catch (err) {
      this.reportFailure(err);
      if (!this.failOpen) {
        this.counts.failedClosed += 1;
        throw new RateLimiterUnavailable({ cause: err });
      }
      this.counts.failedOpen += 1;
      return unknownDecision(limits);
    }
    const result = parseScriptReply(reply);
    return toDecision(limits, result, result.allowed);
  }

  async consumeTokens(keyId: string, limits: RateLimits, tokens: number): Promise<void> {
    assertValidLimits(limits);
    assertValidTokenCount(tokens);
    if (limits.tpm === null || tokens === 0) return;
    try {
      await this.run(keyId, limits, '0', tokens);
    } catch (err) {
      // The response has already been served: nothing to refuse, so the deduction is dropped.
      this.reportFailure(err);
      this.counts.lostConsumes += 1;
    }
  }

  async close(): Promise<void> {
    if (this.redis.status === 'ready') {
      const quit = await this.redis.quit().then(
        () => true,
        () => false,
      );
      if (quit) return;
    }
    this.redis.disconnect();
  }

  private run(keyId: string, limits: RateLimits, admit: '0' | '1', spendTokens: number): Promise<unknown> {
    const base = `${this.prefix}${keyId}`;
    return this.redis[COMMAND](
      `${base}:req`,
      `${base}:tok`,
      limits.rpm ?? 0,
      limits.tpm ?? 0,
      admit,
      spendTokens,
    );
  }

  private reportFailure(err: unknown): void {
    this.unreportedFailures += 1;
    const now = Date.now();
    if (now - this.lastWarningAt < this.warningIntervalMs) return;
    const action = this.failOpen ? 'admitting requests unchecked' : 'refusing requests';
    this.logger.warn(
      { err, failures: this.unreportedFailures },
      `rate limiter: Redis is unavailable, ${action}`,
    );
    this.lastWarningAt = now;
    this.unreportedFailures = 0;
  }
}
