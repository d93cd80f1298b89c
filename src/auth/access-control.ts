import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { SluiceConfig } from '../config/schema.js';
import { BudgetExhausted, InvalidApiKey, ModelNotAllowed, RateLimitExceeded } from '../errors/auth-errors.js';
import type { Logger } from '../observability/logger.js';
import type { KeyStore } from '../storage/types.js';
import {
  bearerToken,
  formatRateLimitHeaders,
  type KeyRecord,
  KeyService,
  keyAllowsModel,
  MemoryRateLimiter,
  type RateLimiter,
  RedisRateLimiter,
} from './index.js';

/** What admission reads of a request. */
interface Asking {
  readonly headers: IncomingHttpHeaders;
  readonly body?: unknown;
}

/** Where admission sets the rate-limit headers: the response (a streamed one carries them too). */
interface Answering {
  readonly raw: { setHeader(name: string, value: string): unknown };
}

/** What an admitted client request carries: its key, and the rate-limit headers to answer with. */
export interface Grant {
  key: KeyRecord;
  headers: Record<string, string>;
}

const KEY_COUNT_REFRESH_MS = 5_000;

/**
 * Whether two secrets are equal, in a time that tells nothing of either: both are hashed to 32
 * bytes first, so that neither a differing length nor a differing prefix answers sooner.
 */
export function sameSecret(given: string, expected: string): boolean {
  const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/**
 * Who may call what. The admin API (and the dashboard) need the admin key when one is set.
 * Client requests need a virtual key as soon as one exists (with none, the gateway runs open
 * and says so); a key may be limited to models, to requests and tokens per minute (token
 * buckets, in Redis when several replicas share them), and to a budget of tokens.
 */
export class AccessControl {
  readonly keys: KeyService | undefined;
  private readonly limiter: RateLimiter;
  private keysExist = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly config: SluiceConfig,
    keyStore: KeyStore | undefined,
    private readonly log: Logger,
  ) {
    this.keys = keyStore ? new KeyService(keyStore) : undefined;
    this.limiter = config.redis.url
      ? new RedisRateLimiter({
          url: config.redis.url,
          keyPrefix: `${config.redis.keyPrefix}rl:`,
          logger: log,
        })
      : new MemoryRateLimiter();
  }

  /** Reads whether keys exist (and keeps reading it: another replica may create the first one). */
  async start(): Promise<void> {
    if (this.limiter instanceof RedisRateLimiter) {
      await this.limiter
        .connect()
        .catch((err: unknown) => this.log.warn({ err }, 'Redis is not reachable yet'));
    }
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), KEY_COUNT_REFRESH_MS);
    this.timer.unref();
    if (!this.config.auth.adminKey) {
      this.log.warn(
        'no admin key (--admin-key / SLUICE_ADMIN_KEY): the admin API and the dashboard are open',
      );
    }
    if (!this.keys) {
      this.log.warn('storage is off (storage.kind: none): no API keys, the gateway is open to every client');
    } else if (!this.keysExist) {
      this.log.warn(
        'no API keys exist: the gateway is open to every client (create one with POST /admin/keys)',
      );
    }
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.limiter.close();
  }

  /** Called when a key was created or deleted here. */
  async refresh(): Promise<void> {
    if (!this.keys) return;
    try {
      const had = this.keysExist;
      this.keysExist = (await this.keys.list()).length > 0;
      if (had && !this.keysExist) {
        this.log.warn('the last API key is gone: the gateway is open to every client again');
      }
    } catch (err) {
      this.log.warn({ err }, 'could not read the API keys');
    }
  }

  /** Whether every client is let in (no key store, or no key in it): admitting asks nothing then. */
  get open(): boolean {
    return !this.keys || !this.keysExist;
  }

  /**
   * Refuses an admin request without the admin key: `Authorization: Bearer`, or the `?key=` the
   * dashboard's routes pass as `queryKey`. Called by the guard registered with those routes
   * (routes/admin.ts), never on a path.
   */
  requireAdmin(authorization: string | undefined, queryKey?: string): void {
    const expected = this.config.auth.adminKey;
    if (!expected) return;
    const given = bearerToken(authorization) ?? queryKey;
    if (given === undefined) throw new InvalidApiKey('missing');
    if (!sameSecret(given, expected)) throw new InvalidApiKey('invalid');
  }

  /** `admit` for the model the request's JSON body names (none when it names none). */
  admitBody(
    request: Asking,
    reply: Answering,
    limited: boolean,
    credential?: string,
  ): Promise<Grant | undefined> {
    const model = (request.body as { model?: unknown } | undefined)?.model;
    return this.admit(request, reply, typeof model === 'string' ? model : undefined, limited, credential);
  }

  /**
   * Admits a client request: its key, the model it asks for, its budget and its rate limits.
   * Undefined when the gateway runs open. `limited` is false for reads that cost no generation.
   */
  async admit(
    request: Asking,
    reply: Answering,
    model: string | undefined,
    limited: boolean,
    /** The key when the route reads it from elsewhere than `Authorization: Bearer` (`x-api-key`). */
    credential?: string,
  ): Promise<Grant | undefined> {
    const keys = this.keys;
    if (!keys || !this.keysExist) return undefined;
    const token = credential ?? bearerToken(request.headers.authorization);
    if (token === undefined) throw new InvalidApiKey('missing');
    const key = await keys.authenticate(token);
    if (!key) throw new InvalidApiKey('invalid');
    if (model !== undefined && !keyAllowsModel(key, model)) throw new ModelNotAllowed(model);
    if (!limited) return { key, headers: {} };
    if ((await keys.budgetLeft(key)) === 0) throw new BudgetExhausted();
    const decision = await this.limiter.check(key.id, { rpm: key.rpm, tpm: key.tpm });
    const headers = formatRateLimitHeaders(decision);
    if (!decision.allowed) throw new RateLimitExceeded(decision, headers);
    // Set on the raw response too, so that a hijacked (streamed) reply carries them.
    for (const [name, value] of Object.entries(headers)) reply.raw.setHeader(name, value);
    return { key, headers };
  }

  /** Records what a request used, against its key's counters, budget and token bucket. */
  async recordUsage(
    grant: Grant | undefined,
    usage: { prompt_tokens?: unknown; completion_tokens?: unknown } | undefined,
  ): Promise<void> {
    if (!grant || !this.keys) return;
    const promptTokens = typeof usage?.prompt_tokens === 'number' ? usage.prompt_tokens : 0;
    const completionTokens = typeof usage?.completion_tokens === 'number' ? usage.completion_tokens : 0;
    try {
      // The bucket first: it gates the key's next request, which may already be on its way (the
      // in-memory limiter is charged before this turn of the event loop ends; the store write,
      // on the storage thread or the network, comes after).
      if (grant.key.tpm !== null) {
        await this.limiter.consumeTokens(
          grant.key.id,
          { rpm: grant.key.rpm, tpm: grant.key.tpm },
          promptTokens + completionTokens,
        );
      }
      await this.keys.recordUsage(grant.key.id, { promptTokens, completionTokens });
    } catch (err) {
      this.log.warn({ err, key: grant.key.id }, 'could not record usage');
    }
  }
}
