import { LRUCache } from 'lru-cache';
import { z } from 'zod';
import { InvalidValue } from '../errors/request-errors.js';
import type { KeyStore, StoredApiKey } from '../storage/types.js';
import {
  generateSecret,
  hashesEqual,
  hashSecret,
  isWellFormedSecret,
  keyPrefix,
  randomBase62,
} from './key-secret.js';

/**
 * Virtual API keys: clients authenticate with a key the gateway issued, and each key carries its
 * own model allowlist, rate limits and lifetime token budget.
 */
export type KeyRecord = StoredApiKey;

export interface CreateKeyInput {
  name?: string | null | undefined;
  /** Omitted or null: every model. */
  models?: string[] | null | undefined;
  rpm?: number | null | undefined;
  tpm?: number | null | undefined;
  budgetTokens?: number | null | undefined;
}

export interface CreatedKey {
  record: KeyRecord;
  /** The only time the secret is available: it is not stored, only its digest. */
  secret: string;
}

/** Lifetime usage, in the shape of an OpenAI `usage` object plus the request count. */
export interface KeyUsage {
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface TokenCounts {
  promptTokens: number;
  completionTokens: number;
}

export interface KeyServiceOptions {
  /** How long a successful lookup is reused, in ms (default 5000; 0 disables the cache). */
  cacheTtlMs?: number | undefined;
  /** At most this many keys are cached (default 10 000). */
  cacheMaxEntries?: number | undefined;
  /** The clock, in ms; injectable for tests. */
  now?: (() => number) | undefined;
}

const ID_RANDOM_LENGTH = 24;

const limit = z.number().int().positive().max(Number.MAX_SAFE_INTEGER).nullable().optional();
const createKeySchema = z.strictObject({
  name: z.string().min(1).max(256).nullable().optional(),
  // An empty allowlist would be a key that can do nothing: almost certainly a mistake.
  models: z.array(z.string().min(1)).min(1).nullable().optional(),
  rpm: limit,
  tpm: limit,
  budgetTokens: limit,
});

export class KeyService {
  /** Hits by secret digest, expiring after the TTL, the least recently used dropped when full; none when the TTL is 0. */
  private readonly cache: LRUCache<string, KeyRecord> | undefined;
  private readonly now: () => number;
  /** Bumped by every delete: a lookup that overlapped one does not cache what it read. */
  private generation = 0;

  constructor(
    private readonly store: KeyStore,
    options: KeyServiceOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    const ttl = options.cacheTtlMs ?? 5000;
    const max = options.cacheMaxEntries ?? 10_000;
    // The service's clock (tests inject one) is the cache's, read on every look-up.
    this.cache =
      ttl > 0 && max > 0
        ? new LRUCache({ max, ttl, ttlResolution: 0, perf: { now: () => this.now() } })
        : undefined;
  }

  /** Issues a key. Throws InvalidRequest (400) for invalid input, with the offending field as `param`. */
  async create(input: CreateKeyInput = {}): Promise<CreatedKey> {
    const parsed = parseCreateInput(input);
    const secret = generateSecret();
    const record: KeyRecord = {
      id: `key_${randomBase62(ID_RANDOM_LENGTH)}`,
      name: parsed.name ?? null,
      hash: hashSecret(secret),
      prefix: keyPrefix(secret),
      models: parsed.models ? [...new Set(parsed.models)] : null,
      rpm: parsed.rpm ?? null,
      tpm: parsed.tpm ?? null,
      budgetTokens: parsed.budgetTokens ?? null,
      createdAt: Math.floor(this.now() / 1000),
    };
    await this.store.insertKey(record);
    return { record, secret };
  }

  /**
   * The key a bearer token belongs to, or undefined. Hits are cached for `cacheTtlMs`, so the hot
   * path reads the database about once per key per TTL; misses are not cached, so a new key works
   * at once. A key deleted through this service stops working immediately; one deleted by another
   * replica stops working here within the TTL. The returned record is frozen (it is shared).
   */
  async authenticate(bearerToken: string | undefined): Promise<KeyRecord | undefined> {
    if (bearerToken === undefined || !isWellFormedSecret(bearerToken)) return undefined;
    const hash = hashSecret(bearerToken);
    const cached = this.cache?.get(hash);
    if (cached !== undefined) return cached;
    const generation = this.generation;
    const record = await this.store.getKeyByHash(hash);
    // The lookup already matched on the digest (an attacker cannot steer a digest's prefix, so its
    // timing reveals nothing); the constant-time check guards against a backend matching loosely.
    if (record === undefined || !hashesEqual(record.hash, hash)) return undefined;
    const shared = freeze(record);
    if (generation === this.generation) this.cache?.set(hash, shared);
    return shared;
  }

  async get(id: string): Promise<KeyRecord | undefined> {
    return this.store.getKey(id);
  }

  /** Every key, oldest first. */
  async list(): Promise<KeyRecord[]> {
    return this.store.listKeys();
  }

  /** Deletes a key and its usage; false when it did not exist. */
  async delete(id: string): Promise<boolean> {
    const deleted = await this.store.deleteKey(id);
    this.generation += 1;
    if (this.cache)
      for (const [hash, record] of this.cache.entries()) if (record.id === id) this.cache.delete(hash);
    return deleted;
  }

  /** Counts one request and its tokens, atomically; false when the key no longer exists. */
  async recordUsage(id: string, tokens: TokenCounts): Promise<boolean> {
    const promptTokens = tokenCount(tokens.promptTokens, 'promptTokens');
    const completionTokens = tokenCount(tokens.completionTokens, 'completionTokens');
    return this.store.addUsage(id, 1, promptTokens, completionTokens);
  }

  /** Undefined when the key does not exist. */
  async usage(id: string): Promise<KeyUsage | undefined> {
    const usage = await this.store.getUsage(id);
    if (usage === undefined) return undefined;
    return {
      requests: usage.requests,
      prompt_tokens: usage.promptTokens,
      completion_tokens: usage.completionTokens,
      total_tokens: usage.promptTokens + usage.completionTokens,
    };
  }

  /**
   * Tokens left in the key's lifetime budget (never below 0), or null when it has none. Usage is
   * only known after a response, so the last request may overshoot: refuse when this is 0. Keys
   * without a budget cost no read; the others read their counters, exact across replicas.
   */
  async budgetLeft(record: KeyRecord): Promise<number | null> {
    if (record.budgetTokens === null) return null;
    const usage = await this.usage(record.id);
    if (usage === undefined) return 0;
    return Math.max(0, record.budgetTokens - usage.total_tokens);
  }
}

/** Whether the key may use `model` (no allowlist means every model). */
export function keyAllowsModel(record: KeyRecord, model: string): boolean {
  return record.models === null || record.models.includes(model);
}

function parseCreateInput(input: CreateKeyInput): z.output<typeof createKeySchema> {
  const result = createKeySchema.safeParse(input);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const param = issue.path.map(String).join('.') || null;
  throw new InvalidValue(`Invalid value for '${param ?? 'key'}': ${issue.message}`, param);
}

function tokenCount(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new TypeError(`${name} must be a non-negative integer, got ${value}`);
  }
  return value;
}

function freeze(record: KeyRecord): KeyRecord {
  if (record.models !== null) Object.freeze(record.models);
  return Object.freeze(record);
}
