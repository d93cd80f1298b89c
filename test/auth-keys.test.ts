import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { KeyService, keyAllowsModel } from '../src/auth/api-keys.js';
import {
  bearerToken,
  generateSecret,
  hashesEqual,
  hashSecret,
  isWellFormedSecret,
  keyPrefix,
  randomBase62,
} from '../src/auth/key-secret.js';
import { InvalidRequest } from '../src/errors/request-errors.js';
import { StoreError } from '../src/errors/storage-errors.js';
import {
  type KeyStore,
  POSTGRES_MIGRATIONS,
  PostgresStore,
  SQLITE_MIGRATIONS,
  SqliteStore,
  type Store,
} from '../src/storage/index.js';
import { POSTGRES_URL } from './helpers/backends.js';

const PG_URL = POSTGRES_URL;
const SECRET_FORMAT = /^sk-sluice-[0-9A-Za-z]{40}$/;

type KeyDatabase = Store & KeyStore;

/** Opens stores on one shared database (a file, or a schema), like several gateway replicas. */
interface Backend {
  name: string;
  open(): KeyDatabase;
  /** A store on a database that a gateway without API keys (schema version 1) created, with conv_old. */
  openAtVersion1(): Promise<KeyDatabase>;
  cleanup(): Promise<void>;
}

const CREATE_SCHEMA_MIGRATIONS =
  'CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT)';
const VERSION_1_DATA = `INSERT INTO schema_migrations VALUES (1, 0);
  INSERT INTO conversations (id, created_at, metadata_json) VALUES ('conv_old', 1, '{"k":"v"}')`;

function sqliteBackend(): Backend {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-auth-'));
  const opened: KeyDatabase[] = [];
  const openAt = (file: string) => {
    const store = new SqliteStore(join(dir, file));
    opened.push(store);
    return store;
  };
  return {
    name: 'sqlite',
    open: () => openAt('keys.db'),
    async openAtVersion1() {
      const db = new Database(join(dir, 'v1.db'));
      db.exec(SQLITE_MIGRATIONS[0]!.sql);
      db.exec(CREATE_SCHEMA_MIGRATIONS);
      db.exec(VERSION_1_DATA);
      db.close();
      return openAt('v1.db');
    },
    async cleanup() {
      await Promise.all(opened.map((store) => store.close()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function postgresBackend(): Backend {
  const prefix = `sluice_auth_${process.pid}_${Date.now().toString(36)}`;
  const opened: KeyDatabase[] = [];
  const admin = new pg.Pool({ connectionString: PG_URL, max: 1 });
  const openIn = (schema: string) => {
    const store = new PostgresStore(PG_URL, { schema });
    opened.push(store);
    return store;
  };
  return {
    name: 'postgres',
    open: () => openIn(`${prefix}_main`),
    async openAtVersion1() {
      const schema = `${prefix}_v1`;
      await admin.query(`CREATE SCHEMA ${schema}; SET search_path = ${schema}`);
      await admin.query(POSTGRES_MIGRATIONS[0]!.sql);
      await admin.query(CREATE_SCHEMA_MIGRATIONS);
      await admin.query(`${VERSION_1_DATA}; SET search_path = DEFAULT`);
      return openIn(schema);
    },
    async cleanup() {
      await Promise.all(opened.map((store) => store.close()));
      for (const suffix of ['main', 'v1'])
        await admin.query(`DROP SCHEMA IF EXISTS ${prefix}_${suffix} CASCADE`);
      await admin.end();
    },
  };
}

describe('key secrets', () => {
  it('are sk-sluice- and 40 base62 characters, all different, over the whole alphabet', () => {
    const secrets = Array.from({ length: 2000 }, generateSecret);
    for (const secret of secrets) expect(secret).toMatch(SECRET_FORMAT);
    expect(new Set(secrets).size).toBe(secrets.length);
    const seen = new Set(secrets.flatMap((secret) => [...secret.slice(10)]));
    expect(seen.size).toBe(62);
  });

  it('draws base62 characters without modulo bias', () => {
    // 248 of 256 byte values are used; a plain `byte % 62` would favour the first 8 characters ~5:4.
    const counts = new Map<string, number>();
    for (const char of randomBase62(124_000)) counts.set(char, (counts.get(char) ?? 0) + 1);
    const low = ['0', '1', '2', '3', '4', '5', '6', '7'].map((c) => counts.get(c) ?? 0);
    const high = ['w', 'x', 'y', 'z', 'W', 'X', 'Y', 'Z'].map((c) => counts.get(c) ?? 0);
    const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
    expect(sum(low) / sum(high)).toBeGreaterThan(0.9);
    expect(sum(low) / sum(high)).toBeLessThan(1.1);
  });

  it('are stored as their SHA-256 hex digest', () => {
    expect(hashSecret('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    const secret = generateSecret();
    expect(hashSecret(secret)).toBe(createHash('sha256').update(secret).digest('hex'));
  });

  it('display the first 12 characters', () => {
    expect(keyPrefix('sk-sluice-AbCdEfGh')).toBe('sk-sluice-Ab');
  });

  it('are recognised by format before any lookup', () => {
    expect(isWellFormedSecret(generateSecret())).toBe(true);
    expect(isWellFormedSecret(`${generateSecret()}x`)).toBe(false);
    expect(isWellFormedSecret(generateSecret().replace('sk-sluice-', 'sk-other-'))).toBe(false);
    expect(isWellFormedSecret(`sk-sluice-${'-'.repeat(40)}`)).toBe(false);
  });

  it('digests compare equal only when identical', () => {
    const hash = hashSecret('a');
    expect(hashesEqual(hash, hashSecret('a'))).toBe(true);
    expect(hashesEqual(hash, hashSecret('b'))).toBe(false);
    expect(hashesEqual(hash, hash.slice(0, 62))).toBe(false);
    expect(hashesEqual('', '')).toBe(false);
  });

  it('come from a Bearer authorization header', () => {
    expect(bearerToken('Bearer sk-sluice-abc')).toBe('sk-sluice-abc');
    expect(bearerToken('bearer   sk-sluice-abc ')).toBe('sk-sluice-abc');
    expect(bearerToken('Basic dXNlcg==')).toBeUndefined();
    expect(bearerToken('Bearer a b')).toBeUndefined();
    expect(bearerToken(undefined)).toBeUndefined();
  });
});

const backends = [
  { name: 'sqlite', makeBackend: sqliteBackend },
  { name: 'postgres', makeBackend: postgresBackend },
];

describe.each(backends)('KeyService on $name', ({ makeBackend }) => {
  const backend = makeBackend();
  let store: KeyDatabase;
  let clock = 1_760_000_000_000;
  const now = () => clock;
  /** A service with the cache off, reading the database on every call. */
  let uncached: KeyService;
  /** Another store on the same database: a second replica. */
  const openReplica = async () => {
    const replica = backend.open();
    await replica.migrate();
    return replica;
  };

  beforeAll(async () => {
    store = backend.open();
    await store.migrate();
    uncached = new KeyService(store, { cacheTtlMs: 0, now });
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('migrates a database created before API keys, keeping its data', async () => {
    const old = await backend.openAtVersion1();
    await old.migrate();
    const service = new KeyService(old, { now });
    const { record, secret } = await service.create({ models: ['alpha'] });
    expect(await service.authenticate(secret)).toEqual(record);
    expect(await old.getConversation('conv_old')).toEqual({
      id: 'conv_old',
      createdAt: 1,
      metadataJson: '{"k":"v"}',
      // Made before keys existed: owned by no key (read only while the gateway runs open).
      ownerKeyId: null,
    });
  });

  describe('create', () => {
    it('returns the secret once and stores only its digest and prefix', async () => {
      const { record, secret } = await uncached.create({ name: 'ci', rpm: 60, tpm: 1000, budgetTokens: 5 });
      expect(secret).toMatch(SECRET_FORMAT);
      expect(record).toEqual({
        id: expect.stringMatching(/^key_[0-9A-Za-z]{24}$/),
        name: 'ci',
        hash: hashSecret(secret),
        prefix: secret.slice(0, 12),
        models: null,
        rpm: 60,
        tpm: 1000,
        budgetTokens: 5,
        createdAt: Math.floor(clock / 1000),
      });
      const stored = await uncached.get(record.id);
      expect(stored).toEqual(record);
      expect(JSON.stringify(await uncached.list())).not.toContain(secret.slice(10));
    });

    it('defaults to no name, every model and no limits', async () => {
      const { record } = await uncached.create();
      expect(await uncached.get(record.id)).toMatchObject({
        name: null,
        models: null,
        rpm: null,
        tpm: null,
        budgetTokens: null,
      });
    });

    it.each([
      [{ models: [] }, 'models'],
      [{ models: [''] }, 'models.0'],
      [{ rpm: 0 }, 'rpm'],
      [{ tpm: 1.5 }, 'tpm'],
      [{ budgetTokens: -1 }, 'budgetTokens'],
      [{ name: '' }, 'name'],
    ])('refuses %j with an InvalidRequest on %s', async (input, param) => {
      const error = await uncached.create(input).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(InvalidRequest);
      expect(error).toMatchObject({ status: 400, param });
    });

    it('refuses unknown fields', async () => {
      const input = JSON.parse('{"rpm": 5, "admin": true}');
      await expect(uncached.create(input)).rejects.toBeInstanceOf(InvalidRequest);
    });

    it('a duplicate hash is store_duplicate', async () => {
      const { record } = await uncached.create();
      const copy = { ...record, id: `${record.id}_copy` };
      await expect(store.insertKey(copy)).rejects.toMatchObject({ code: 'store_duplicate' });
      await expect(store.insertKey(copy)).rejects.toBeInstanceOf(StoreError);
    });
  });

  describe('models allowlist', () => {
    it('round-trips through the database, deduplicated, and is what keyAllowsModel checks', async () => {
      const { record, secret } = await uncached.create({ models: ['alpha', 'beta', 'alpha'] });
      const found = await uncached.authenticate(secret);
      expect(found?.models).toEqual(['alpha', 'beta']);
      expect(keyAllowsModel(found!, 'alpha')).toBe(true);
      expect(keyAllowsModel(found!, 'gamma')).toBe(false);
      const open = await uncached.create();
      expect(keyAllowsModel(open.record, 'anything')).toBe(true);
      expect(record.models).toEqual(['alpha', 'beta']);
    });
  });

  describe('authenticate', () => {
    it('finds a key by its secret, and nothing for an unknown or malformed one', async () => {
      const { record, secret } = await uncached.create({ name: 'auth' });
      expect(await uncached.authenticate(secret)).toEqual(record);
      expect(await uncached.authenticate(generateSecret())).toBeUndefined();
      expect(await uncached.authenticate(secret.slice(0, -1))).toBeUndefined();
      expect(await uncached.authenticate(undefined)).toBeUndefined();
    });

    it('does not query the database for malformed tokens', async () => {
      const spy = vi.spyOn(store, 'getKeyByHash');
      try {
        await uncached.authenticate('not-a-key');
        await uncached.authenticate(`Bearer ${generateSecret()}`);
        expect(spy).not.toHaveBeenCalled();
      } finally {
        spy.mockRestore();
      }
    });

    it('serves repeated lookups from the cache until the TTL passes', async () => {
      const service = new KeyService(store, { cacheTtlMs: 5000, now });
      const { record, secret } = await service.create();
      const spy = vi.spyOn(store, 'getKeyByHash');
      try {
        for (let i = 0; i < 5; i++) expect(await service.authenticate(secret)).toEqual(record);
        expect(spy).toHaveBeenCalledTimes(1);
        clock += 4999;
        await service.authenticate(secret);
        expect(spy).toHaveBeenCalledTimes(1);
        // lru-cache (the cache's library) expires an entry once more than its TTL has passed.
        clock += 2;
        expect(await service.authenticate(secret)).toEqual(record);
        expect(spy).toHaveBeenCalledTimes(2);
      } finally {
        spy.mockRestore();
      }
    });

    it('returns frozen records, so callers cannot alter what is cached', async () => {
      const service = new KeyService(store, { now });
      const { secret } = await service.create({ models: ['alpha'] });
      const found = await service.authenticate(secret);
      expect(Object.isFrozen(found)).toBe(true);
      expect(Object.isFrozen(found?.models)).toBe(true);
    });

    it('keeps at most cacheMaxEntries keys', async () => {
      const service = new KeyService(store, { cacheTtlMs: 60_000, cacheMaxEntries: 2, now });
      const keys = await Promise.all([service.create(), service.create(), service.create()]);
      const spy = vi.spyOn(store, 'getKeyByHash');
      try {
        for (const { secret } of keys) await service.authenticate(secret);
        expect(spy).toHaveBeenCalledTimes(3);
        await service.authenticate(keys[2]!.secret);
        await service.authenticate(keys[1]!.secret);
        expect(spy).toHaveBeenCalledTimes(3);
        await service.authenticate(keys[0]!.secret);
        expect(spy).toHaveBeenCalledTimes(4);
      } finally {
        spy.mockRestore();
      }
    });

    it('refuses a key deleted through the same service at once, even while cached', async () => {
      const service = new KeyService(store, { cacheTtlMs: 60_000, now });
      const { record, secret } = await service.create();
      expect(await service.authenticate(secret)).toEqual(record);
      expect(await service.delete(record.id)).toBe(true);
      expect(await service.authenticate(secret)).toBeUndefined();
      expect(await service.delete(record.id)).toBe(false);
    });

    it('does not cache a lookup that overlapped a delete', async () => {
      const service = new KeyService(store, { cacheTtlMs: 60_000, now });
      const { record, secret } = await service.create();
      // The lookup reads the key, then the delete completes before the lookup's answer arrives.
      let deleted = (): void => {};
      const deleteDone = new Promise<void>((resolve) => {
        deleted = resolve;
      });
      const read = store.getKeyByHash.bind(store);
      const spy = vi.spyOn(store, 'getKeyByHash').mockImplementationOnce(async (hash) => {
        const stale = await read(hash);
        await deleteDone;
        return stale;
      });
      try {
        const lookup = service.authenticate(secret);
        await service.delete(record.id);
        deleted();
        expect(await lookup).toEqual(record);
        expect(await service.authenticate(secret)).toBeUndefined();
      } finally {
        spy.mockRestore();
      }
    });

    it('refuses a key deleted by another replica once the TTL has passed', async () => {
      const replicaA = new KeyService(store, { cacheTtlMs: 3000, now });
      const replicaB = new KeyService(await openReplica(), { cacheTtlMs: 3000, now });
      const { record, secret } = await replicaA.create();
      expect(await replicaA.authenticate(secret)).toEqual(record);
      expect(await replicaB.delete(record.id)).toBe(true);
      expect(await replicaA.authenticate(secret)).toEqual(record);
      clock += 3001;
      expect(await replicaA.authenticate(secret)).toBeUndefined();
    });
  });

  describe('list, get and delete', () => {
    it('lists keys oldest first', async () => {
      const first = await uncached.create({ name: 'first' });
      clock += 1000;
      const second = await uncached.create({ name: 'second' });
      const ids = (await uncached.list()).map((key) => key.id);
      expect(ids).toContain(first.record.id);
      expect(ids.indexOf(first.record.id)).toBeLessThan(ids.indexOf(second.record.id));
      const createdAts = (await uncached.list()).map((key) => key.createdAt);
      expect(createdAts).toEqual([...createdAts].sort((a, b) => a - b));
    });

    it('delete removes the key and its usage', async () => {
      const { record } = await uncached.create();
      await uncached.recordUsage(record.id, { promptTokens: 1, completionTokens: 1 });
      expect(await uncached.delete(record.id)).toBe(true);
      expect(await uncached.get(record.id)).toBeUndefined();
      expect(await uncached.usage(record.id)).toBeUndefined();
      expect(await store.getUsage(record.id)).toBeUndefined();
      expect(await uncached.recordUsage(record.id, { promptTokens: 1, completionTokens: 1 })).toBe(false);
    });
  });

  describe('usage', () => {
    it('starts at zero and sums requests and tokens', async () => {
      const { record } = await uncached.create();
      expect(await uncached.usage(record.id)).toEqual({
        requests: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        total_tokens: 0,
      });
      await uncached.recordUsage(record.id, { promptTokens: 10, completionTokens: 5 });
      await uncached.recordUsage(record.id, { promptTokens: 7, completionTokens: 0 });
      expect(await uncached.usage(record.id)).toEqual({
        requests: 2,
        prompt_tokens: 17,
        completion_tokens: 5,
        total_tokens: 22,
      });
    });

    it('loses no increment when many requests on two connections record at once', async () => {
      const other = new KeyService(await openReplica(), { now });
      const { record } = await uncached.create();
      const writes = Array.from({ length: 100 }, (_, i) =>
        (i % 2 === 0 ? uncached : other).recordUsage(record.id, { promptTokens: i, completionTokens: 1 }),
      );
      expect(await Promise.all(writes)).toEqual(Array(100).fill(true));
      expect(await uncached.usage(record.id)).toEqual({
        requests: 100,
        prompt_tokens: 4950,
        completion_tokens: 100,
        total_tokens: 5050,
      });
    });

    it('refuses negative or fractional token counts', async () => {
      const { record } = await uncached.create();
      await expect(
        uncached.recordUsage(record.id, { promptTokens: -1, completionTokens: 0 }),
      ).rejects.toThrow(TypeError);
      await expect(
        uncached.recordUsage(record.id, { promptTokens: 0, completionTokens: 0.5 }),
      ).rejects.toThrow(TypeError);
      expect((await uncached.usage(record.id))?.requests).toBe(0);
    });

    it('keeps large totals exact', async () => {
      const { record } = await uncached.create();
      await uncached.recordUsage(record.id, { promptTokens: 3_000_000_000, completionTokens: 2_000_000_000 });
      expect((await uncached.usage(record.id))?.total_tokens).toBe(5_000_000_000);
    });
  });

  describe('budgetLeft', () => {
    it('is the budget minus the tokens used, never below zero', async () => {
      const { record } = await uncached.create({ budgetTokens: 100 });
      expect(await uncached.budgetLeft(record)).toBe(100);
      await uncached.recordUsage(record.id, { promptTokens: 30, completionTokens: 20 });
      expect(await uncached.budgetLeft(record)).toBe(50);
      await uncached.recordUsage(record.id, { promptTokens: 40, completionTokens: 20 });
      expect(await uncached.budgetLeft(record)).toBe(0);
    });

    it('is null without a budget, without reading the database', async () => {
      const { record } = await uncached.create();
      const spy = vi.spyOn(store, 'getUsage');
      try {
        expect(await uncached.budgetLeft(record)).toBeNull();
        expect(spy).not.toHaveBeenCalled();
      } finally {
        spy.mockRestore();
      }
    });

    it('is zero for a deleted key', async () => {
      const { record } = await uncached.create({ budgetTokens: 10 });
      await uncached.delete(record.id);
      expect(await uncached.budgetLeft(record)).toBe(0);
    });
  });
});
