import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreError } from '../src/errors/storage-errors.js';
import { fromPostgresError, fromSqliteError } from '../src/storage/error-mapping.js';
import {
  createStore,
  POSTGRES_MIGRATIONS,
  PostgresStore,
  SQLITE_MIGRATIONS,
  SqliteStore,
  type Store,
  type StoredItem,
  type StoredResponse,
} from '../src/storage/index.js';
import { POSTGRES_URL } from './helpers/backends.js';

const PG_URL = POSTGRES_URL;

/** Awkward JSON text: unicode, escapes, odd key order and whitespace. It must come back untouched. */
const TRICKY_JSON = '{"b":1,  "a":"é\\u00e9",\n\t"c":"\\"q\\" \\\\ 😀 \\n","d":[ 1.50, -0e0 ] }';

/** One backend under test. Stores opened on the same `database` name share their data. */
interface Backend {
  name: 'sqlite' | 'postgres';
  expectedVersions: number[];
  open(database: string): Store;
  appliedVersions(database: string): Promise<number[]>;
  itemSeqs(database: string, conversationId: string): Promise<number[]>;
  cleanup(): Promise<void>;
}

function sqliteBackend(): Backend {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-storage-'));
  const opened: Store[] = [];
  const pathOf = (database: string) => join(dir, 'nested', 'dirs', `${database}.db`);
  const selectNumbers = (database: string, sql: string, ...params: string[]): number[] => {
    const db = new Database(pathOf(database), { readonly: true });
    try {
      return db
        .prepare<string[], number>(sql)
        .pluck()
        .all(...params);
    } finally {
      db.close();
    }
  };
  return {
    name: 'sqlite',
    expectedVersions: SQLITE_MIGRATIONS.map((m) => m.version),
    open(database) {
      const store = new SqliteStore(pathOf(database));
      opened.push(store);
      return store;
    },
    async appliedVersions(database) {
      return selectNumbers(database, 'SELECT version FROM schema_migrations ORDER BY version');
    },
    async itemSeqs(database, conversationId) {
      const sql = 'SELECT seq FROM conversation_items WHERE conversation_id = ? ORDER BY seq';
      return selectNumbers(database, sql, conversationId);
    },
    async cleanup() {
      await Promise.all(opened.map((store) => store.close()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function postgresBackend(): Backend {
  const prefix = `sluice_test_${process.pid}_${Date.now().toString(36)}`;
  const schemas = new Set<string>();
  const opened: Store[] = [];
  const admin = new pg.Pool({ connectionString: PG_URL, max: 2 });
  const schemaOf = (database: string) => {
    const schema = `${prefix}_${database}`;
    schemas.add(schema);
    return schema;
  };
  return {
    name: 'postgres',
    expectedVersions: POSTGRES_MIGRATIONS.map((m) => m.version),
    open(database) {
      const store = new PostgresStore(PG_URL, { schema: schemaOf(database) });
      opened.push(store);
      return store;
    },
    async appliedVersions(database) {
      const sql = `SELECT version FROM ${schemaOf(database)}.schema_migrations ORDER BY version`;
      const { rows } = await admin.query<{ version: number }>(sql);
      return rows.map((r) => r.version);
    },
    async itemSeqs(database, conversationId) {
      const sql = `SELECT seq FROM ${schemaOf(database)}.conversation_items WHERE conversation_id = $1 ORDER BY seq`;
      const { rows } = await admin.query<{ seq: number }>(sql, [conversationId]);
      return rows.map((r) => r.seq);
    },
    async cleanup() {
      await Promise.all(opened.map((store) => store.close()));
      for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await admin.end();
    },
  };
}

async function failure(promise: Promise<unknown>): Promise<StoreError> {
  const outcome = await promise.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(outcome).toBeInstanceOf(StoreError);
  return outcome as StoreError;
}

function response(id: string, overrides: Partial<StoredResponse> = {}): StoredResponse {
  return {
    id,
    json: TRICKY_JSON,
    status: 'in_progress',
    model: 'alpha',
    createdAt: 1_760_000_000,
    previousResponseId: 'resp_previous',
    conversationId: 'conv_x',
    inputItemsJson: '[{"id":"msg_1","content":"\\u2603 ☃"} ]',
    eventsJson: '[ {"type":"response.created"}]',
    cancelRequested: false,
    ownerKeyId: 'key_owner',
    ownerReplicaId: null,
    ...overrides,
  };
}

function items(prefix: string, count: number): StoredItem[] {
  return Array.from({ length: count }, (_, i) => ({
    id: `${prefix}${i + 1}`,
    json: `{"id":"${prefix}${i + 1}",  "n":${i + 1},"t":"é\\u00e9"}`,
  }));
}

const ids = (list: readonly StoredItem[] | undefined) => list?.map((item) => item.id);

const backends = [
  { name: 'sqlite', makeBackend: sqliteBackend },
  { name: 'postgres', makeBackend: postgresBackend },
];

describe.each(backends)('storage on $name', ({ makeBackend }) => {
  const backend = makeBackend();
  let store: Store;
  let counter = 0;
  const uniqueId = (prefix: string) => `${prefix}_${++counter}`;

  beforeAll(async () => {
    store = backend.open('main');
    await store.migrate();
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it(`is the ${backend.name} backend`, () => {
    expect(store.kind).toBe(backend.name);
  });

  describe('migrations', () => {
    it('migrating again changes nothing and keeps the data', async () => {
      const id = uniqueId('resp');
      await store.insertResponse(response(id));
      await store.migrate();
      expect(await backend.appliedVersions('main')).toEqual(backend.expectedVersions);
      expect(await store.getResponse(id)).toEqual(response(id));
    });

    it('two stores migrating a fresh database at once both succeed', async () => {
      const first = backend.open('fresh');
      const second = backend.open('fresh');
      await Promise.all([first.migrate(), second.migrate()]);
      expect(await backend.appliedVersions('fresh')).toEqual(backend.expectedVersions);
      await first.insertConversation(
        { id: 'conv_fresh', createdAt: 1, metadataJson: '{}', ownerKeyId: null },
        [],
      );
      expect(await second.getConversation('conv_fresh')).toEqual({
        id: 'conv_fresh',
        createdAt: 1,
        metadataJson: '{}',
        ownerKeyId: null,
      });
    });

    it('a store on an unmigrated database fails with store_error', async () => {
      const error = await failure(backend.open('unmigrated').getResponse('resp_1'));
      expect(error).toMatchObject({ code: 'store_error', retryable: false });
    });
  });

  describe('responses', () => {
    it('returns the JSON texts byte for byte', async () => {
      const id = uniqueId('resp');
      const stored = response(id, { previousResponseId: null, conversationId: null, eventsJson: null });
      await store.insertResponse(stored);
      const got = await store.getResponse(id);
      expect(got).toEqual(stored);
      expect(Buffer.from(got?.json ?? '').equals(Buffer.from(TRICKY_JSON))).toBe(true);
      expect(await store.getResponse(uniqueId('missing'))).toBeUndefined();
    });

    it('rejects a duplicate id with store_duplicate', async () => {
      const id = uniqueId('resp');
      await store.insertResponse(response(id));
      const error = await failure(store.insertResponse(response(id, { json: '{}' })));
      expect(error).toMatchObject({ code: 'store_duplicate', retryable: false });
      expect(error.message).not.toMatch(/UNIQUE|duplicate key|responses/);
      expect((await store.getResponse(id))?.json).toBe(TRICKY_JSON);
    });

    it('updates json and status, and the events only when given', async () => {
      const id = uniqueId('resp');
      await store.insertResponse(response(id));
      expect(await store.updateResponse(id, { json: '{"v": 2}', status: 'in_progress' })).toBe(true);
      expect(await store.getResponse(id)).toEqual(
        response(id, { json: '{"v": 2}', status: 'in_progress', eventsJson: response(id).eventsJson }),
      );
      expect(
        await store.updateResponse(id, { json: '{"v":3}', status: 'in_progress', eventsJson: '[ ]' }),
      ).toBe(true);
      expect((await store.getResponse(id))?.eventsJson).toBe('[ ]');
      expect(await store.updateResponse(id, { json: '{"v":4}', status: 'failed', eventsJson: null })).toBe(
        true,
      );
      expect(await store.getResponse(id)).toMatchObject({ json: '{"v":4}', eventsJson: null });
      // Ended: never written again.
      expect(await store.updateResponse(id, { json: '{"v":5}', status: 'completed' })).toBe(false);
      expect(await store.updateResponse(uniqueId('missing'), { json: '{}', status: 'completed' })).toBe(
        false,
      );
    });

    it('deletes once', async () => {
      const id = uniqueId('resp');
      await store.insertResponse(response(id));
      expect(await store.deleteResponse(id)).toBe(true);
      expect(await store.getResponse(id)).toBeUndefined();
      expect(await store.deleteResponse(id)).toBe(false);
    });

    it('records a cancel request', async () => {
      const id = uniqueId('resp');
      await store.insertResponse(response(id));
      expect(await store.requestCancel(id)).toBe(true);
      expect((await store.getResponse(id))?.cancelRequested).toBe(true);
      expect(await store.requestCancel(id)).toBe(true);
      expect(await store.requestCancel(uniqueId('missing'))).toBe(false);
    });
  });

  describe('conversations', () => {
    it('stores a conversation with its items, in order, byte for byte', async () => {
      const id = uniqueId('conv');
      const conversation = {
        id,
        createdAt: 1_760_000_001,
        metadataJson: TRICKY_JSON,
        ownerKeyId: 'key_owner',
      };
      const tricky = { id: 'tricky "\\ é', json: TRICKY_JSON };
      await store.insertConversation(conversation, [...items('a', 3), tricky]);
      await store.appendConversationItems(id, [{ ...tricky, id: 'appended' }]);
      expect(await store.getConversation(id)).toEqual(conversation);
      expect(await store.allConversationItems(id)).toEqual([
        ...items('a', 3),
        tricky,
        { ...tricky, id: 'appended' },
      ]);
      expect(await store.getConversationItem(id, tricky.id)).toEqual(tricky);
      expect(await store.getConversation(uniqueId('missing'))).toBeUndefined();
    });

    it('rejects a duplicate conversation id or item id with store_duplicate', async () => {
      const id = uniqueId('conv');
      await store.insertConversation(
        { id, createdAt: 1, metadataJson: '{}', ownerKeyId: null },
        items('a', 2),
      );
      const again = await failure(
        store.insertConversation({ id, createdAt: 2, metadataJson: '{}', ownerKeyId: null }, []),
      );
      expect(again.code).toBe('store_duplicate');
      const duplicateItem = await failure(store.appendConversationItems(id, items('a', 1)));
      expect(duplicateItem.code).toBe('store_duplicate');
      expect(ids(await store.allConversationItems(id))).toEqual(['a1', 'a2']);
    });

    it('updates the metadata', async () => {
      const id = uniqueId('conv');
      await store.insertConversation({ id, createdAt: 1, metadataJson: '{}', ownerKeyId: null }, []);
      expect(await store.updateConversationMetadata(id, '{"topic":  "é"}')).toBe(true);
      expect((await store.getConversation(id))?.metadataJson).toBe('{"topic":  "é"}');
      expect(await store.updateConversationMetadata(uniqueId('missing'), '{}')).toBe(false);
    });

    it('appends after the existing items', async () => {
      const id = uniqueId('conv');
      await store.insertConversation(
        { id, createdAt: 1, metadataJson: '{}', ownerKeyId: null },
        items('a', 2),
      );
      expect(await store.appendConversationItems(id, items('b', 2))).toBe(true);
      expect(await store.appendConversationItems(id, [])).toBe(true);
      expect(await store.appendConversationItems(id, items('c', 1))).toBe(true);
      expect(await store.allConversationItems(id)).toEqual([
        ...items('a', 2),
        ...items('b', 2),
        ...items('c', 1),
      ]);
      expect(await store.appendConversationItems(uniqueId('missing'), items('x', 1))).toBe(false);
    });

    it('tells an empty conversation from a missing one', async () => {
      const id = uniqueId('conv');
      await store.insertConversation({ id, createdAt: 1, metadataJson: '{}', ownerKeyId: null }, []);
      expect(await store.allConversationItems(id)).toEqual([]);
      expect(await store.listConversationItems(id, { limit: 10, order: 'asc' })).toEqual({
        data: [],
        hasMore: false,
      });
      expect(await store.allConversationItems(uniqueId('missing'))).toBeUndefined();
      expect(
        await store.listConversationItems(uniqueId('missing'), { limit: 10, order: 'asc' }),
      ).toBeUndefined();
    });

    it('gets and deletes a single item', async () => {
      const id = uniqueId('conv');
      const other = uniqueId('conv');
      await store.insertConversation(
        { id, createdAt: 1, metadataJson: '{}', ownerKeyId: null },
        items('a', 3),
      );
      await store.insertConversation(
        { id: other, createdAt: 1, metadataJson: '{}', ownerKeyId: null },
        items('z', 1),
      );
      expect(await store.getConversationItem(id, 'a2')).toEqual(items('a', 3)[1]);
      expect(await store.getConversationItem(id, 'z1')).toBeUndefined();
      expect(await store.deleteConversationItem(id, 'z1')).toBe(false);
      expect(await store.deleteConversationItem(id, 'a2')).toBe(true);
      expect(await store.deleteConversationItem(id, 'a2')).toBe(false);
      expect(await store.getConversationItem(id, 'a2')).toBeUndefined();
      expect(ids(await store.allConversationItems(id))).toEqual(['a1', 'a3']);
      expect(await store.listConversationItems(id, { after: 'a2', limit: 10, order: 'asc' })).toEqual({
        data: [],
        hasMore: false,
      });
      expect(ids(await store.allConversationItems(other))).toEqual(['z1']);
    });

    it('deleting a conversation deletes its items', async () => {
      const id = uniqueId('conv');
      await store.insertConversation(
        { id, createdAt: 1, metadataJson: '{}', ownerKeyId: null },
        items('a', 3),
      );
      expect(await store.deleteConversation(id)).toBe(true);
      expect(await store.getConversation(id)).toBeUndefined();
      expect(await store.getConversationItem(id, 'a1')).toBeUndefined();
      expect(await store.deleteConversation(id)).toBe(false);
      expect(await backend.itemSeqs('main', id)).toEqual([]);
      // Leftover items would collide with, or be listed among, the new ones.
      await store.insertConversation(
        { id, createdAt: 2, metadataJson: '{}', ownerKeyId: null },
        items('a', 1),
      );
      expect(await store.allConversationItems(id)).toEqual(items('a', 1));
    });
  });

  describe('pagination', () => {
    const id = 'conv_pages';
    beforeAll(async () => {
      await store.insertConversation(
        { id, createdAt: 1, metadataJson: '{}', ownerKeyId: null },
        items('i', 4),
      );
      await store.appendConversationItems(id, items('i', 7).slice(4));
    });

    const page = async (order: 'asc' | 'desc', limit: number, after?: string) => {
      const result = await store.listConversationItems(id, { order, limit, after });
      return result && { ids: ids(result.data), hasMore: result.hasMore };
    };

    it('pages forward', async () => {
      expect(await page('asc', 3)).toEqual({ ids: ['i1', 'i2', 'i3'], hasMore: true });
      expect(await page('asc', 3, 'i3')).toEqual({ ids: ['i4', 'i5', 'i6'], hasMore: true });
      expect(await page('asc', 3, 'i6')).toEqual({ ids: ['i7'], hasMore: false });
      expect(await page('asc', 3, 'i4')).toEqual({ ids: ['i5', 'i6', 'i7'], hasMore: false });
      expect(await page('asc', 7)).toEqual({ ids: items('i', 7).map((i) => i.id), hasMore: false });
      expect(await page('asc', 3, 'i7')).toEqual({ ids: [], hasMore: false });
    });

    it('pages backward', async () => {
      expect(await page('desc', 3)).toEqual({ ids: ['i7', 'i6', 'i5'], hasMore: true });
      expect(await page('desc', 3, 'i5')).toEqual({ ids: ['i4', 'i3', 'i2'], hasMore: true });
      expect(await page('desc', 3, 'i2')).toEqual({ ids: ['i1'], hasMore: false });
      expect(await page('desc', 3, 'i4')).toEqual({ ids: ['i3', 'i2', 'i1'], hasMore: false });
      expect(await page('desc', 1, 'i1')).toEqual({ ids: [], hasMore: false });
    });

    it('returns the items themselves', async () => {
      const result = await store.listConversationItems(id, { order: 'desc', limit: 1, after: 'i7' });
      expect(result).toEqual({ data: [items('i', 6)[5]], hasMore: true });
    });

    it('returns an empty page after an unknown item', async () => {
      expect(await page('asc', 3, 'nope')).toEqual({ ids: [], hasMore: false });
      expect(await page('desc', 3, 'nope')).toEqual({ ids: [], hasMore: false });
    });
  });

  it('concurrent appends from two replicas get unique, increasing seqs', async () => {
    const replica = backend.open('main');
    await replica.migrate();
    const id = uniqueId('conv');
    await store.insertConversation({ id, createdAt: 1, metadataJson: '{}', ownerKeyId: null }, []);
    const calls = Array.from({ length: 20 }, (_, call) => items(`c${call}-`, 3));
    const results = await Promise.all(
      calls.map((batch, call) => (call % 2 === 0 ? store : replica).appendConversationItems(id, batch)),
    );
    expect(results).toEqual(Array(20).fill(true));
    const all = (await store.allConversationItems(id)) ?? [];
    expect(all).toHaveLength(60);
    expect(new Set(ids(all)).size).toBe(60);
    expect(await backend.itemSeqs('main', id)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    // Each call's items stay together and in order.
    for (let at = 0; at < 60; at += 3) {
      const prefix = all[at]?.id.slice(0, -1);
      expect(ids(all.slice(at, at + 3))).toEqual([`${prefix}1`, `${prefix}2`, `${prefix}3`]);
    }
  });
});

describe('postgres: unreachable server', () => {
  let silent: Server;
  const sockets: Socket[] = [];
  beforeAll(async () => {
    // Accepts connections and never answers, like a server behind a dead network path.
    silent = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  });

  it('a refused connection fails fast with store_unavailable', async () => {
    const store = new PostgresStore('postgres://root@127.0.0.1:1/test', { connectionTimeoutMillis: 2000 });
    const started = Date.now();
    const migrate = await failure(store.migrate());
    expect(migrate).toMatchObject({ code: 'store_unavailable', retryable: true });
    expect((await failure(store.getResponse('resp_1'))).code).toBe('store_unavailable');
    expect(Date.now() - started).toBeLessThan(5000);
    await store.close();
  });

  it('a server that never answers fails with store_unavailable after the connection timeout', async () => {
    const address = silent.address();
    if (address === null || typeof address === 'string') throw new Error('no port');
    const url = `postgres://root@127.0.0.1:${address.port}/test`;
    // Each attempt waits out the connection timeout; writes retry for writeRetryMs in all.
    const store = new PostgresStore(url, { connectionTimeoutMillis: 300, writeRetryMs: 500 });
    const started = Date.now();
    expect(await failure(store.insertResponse(response('resp_1')))).toMatchObject({
      code: 'store_unavailable',
      retryable: true,
    });
    expect(Date.now() - started).toBeLessThan(3000);
    await store.close();
  });
});

describe('driver error mapping', () => {
  const withCode = (code: string, message = 'driver says no') => Object.assign(new Error(message), { code });

  it.each([
    ['23505', 'store_duplicate'],
    ['57P01', 'store_unavailable'],
    ['08006', 'store_unavailable'],
    ['ECONNRESET', 'store_unavailable'],
    ['42601', 'store_error'],
    ['23503', 'store_error'],
  ])('postgres %s is %s', (code, expected) => {
    const error = fromPostgresError('op', withCode(code));
    expect(error).toMatchObject({ code: expected, retryable: expected === 'store_unavailable' });
    expect(error.message).not.toContain('driver says no');
    expect(error.cause).toBeInstanceOf(Error);
  });

  it('postgres connection losses without a code are store_unavailable', () => {
    expect(fromPostgresError('op', new Error('Connection terminated unexpectedly')).code).toBe(
      'store_unavailable',
    );
    expect(fromPostgresError('op', new AggregateError([withCode('ECONNREFUSED')])).code).toBe(
      'store_unavailable',
    );
    expect(fromPostgresError('op', new Error('something else')).code).toBe('store_error');
  });

  it.each([
    ['SQLITE_CONSTRAINT_PRIMARYKEY', 'store_duplicate'],
    ['SQLITE_CONSTRAINT_UNIQUE', 'store_duplicate'],
    ['SQLITE_BUSY', 'store_unavailable'],
    ['SQLITE_CONSTRAINT_FOREIGNKEY', 'store_error'],
    ['SQLITE_FULL', 'store_full'],
    ['SQLITE_READONLY_DBMOVED', 'store_read_only'],
    ['SQLITE_IOERR_WRITE', 'store_io_error'],
    ['EROFS', 'store_read_only'],
  ])('sqlite %s is %s', (code, expected) => {
    expect(fromSqliteError('op', withCode(code)).code).toBe(expected);
  });
});

describe('createStore', () => {
  it('opens an in-memory SQLite store', async () => {
    const store = createStore({ kind: 'sqlite', path: ':memory:' });
    await store.migrate();
    await store.insertResponse(response('resp_memory'));
    expect(await store.getResponse('resp_memory')).toEqual(response('resp_memory'));
    await store.close();
  });

  it('opens SQLite files in WAL mode, and wraps a path that cannot be created', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-storage-'));
    try {
      const path = join(dir, 'a', 'b', 'store.db');
      const store = createStore({ kind: 'sqlite', path });
      await store.migrate();
      await store.close();
      const db = new Database(path, { readonly: true });
      expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
      db.close();
      writeFileSync(join(dir, 'file'), '');
      expect(() => createStore({ kind: 'sqlite', path: join(dir, 'file', 'store.db') })).toThrow(StoreError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('opens a PostgreSQL store', async () => {
    const schema = `sluice_test_create_${process.pid}_${Date.now().toString(36)}`;
    const store = createStore({ kind: 'postgres', url: PG_URL, schema });
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    try {
      expect(store.kind).toBe('postgres');
      // It connects: migrations create its tables in that PostgreSQL schema, and what it writes
      // is there for any other client of the database to read.
      await store.migrate();
      await store.insertResponse(response('resp_pg'));
      expect(await store.getResponse('resp_pg')).toEqual(response('resp_pg'));
      const rows = await admin.query(`SELECT id, json FROM "${schema}".responses`);
      expect(rows.rows).toEqual([{ id: 'resp_pg', json: response('resp_pg').json }]);
    } finally {
      await store.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    }
  });
});
