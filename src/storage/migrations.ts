import type BetterSqlite3 from 'better-sqlite3';
import type { ClientBase } from 'pg';

/**
 * Versioned schema migrations, one list per SQL dialect. A migration is never edited once
 * released: a schema change is a new version appended to both lists. Every JSON column is
 * TEXT so that what is read back is byte-identical to what was written. `updated_at` and
 * `applied_at` are Unix milliseconds; `created_at` is Unix seconds like the API objects.
 */
export interface Migration {
  version: number;
  description: string;
  /** One or more statements, run inside the migration transaction. */
  sql: string;
}

/** Version 3 is the same SQL in both dialects. */
const OWNERS_MIGRATION: Migration = {
  version: 3,
  description: 'the API key that owns each response and conversation',
  sql: `
    ALTER TABLE responses ADD COLUMN owner_key_id TEXT;
    ALTER TABLE conversations ADD COLUMN owner_key_id TEXT;
  `,
};

/**
 * Version 4: each gateway process holds a lease in `gateway_replicas`, renewed by its heartbeat
 * (`expires_at`, Unix ms); a background response names the replica running it. An unfinished
 * response whose replica's lease lapsed is ended by a live replica (see orphan-sweeper.ts).
 */
function replicaLeasesMigration(bigint: 'INTEGER' | 'BIGINT', strict: string): Migration {
  return {
    version: 4,
    description: 'replica leases, and the replica that runs each background response',
    sql: `
      CREATE TABLE gateway_replicas (
        id TEXT PRIMARY KEY,
        started_at ${bigint} NOT NULL,
        expires_at ${bigint} NOT NULL
      )${strict};
      ALTER TABLE responses ADD COLUMN owner_replica_id TEXT;
      CREATE INDEX responses_unfinished ON responses (created_at) WHERE status IN ('queued', 'in_progress');
    `,
  };
}

export const SQLITE_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'responses, conversations and conversation items',
    sql: `
      CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        model TEXT NOT NULL,
        previous_response_id TEXT,
        conversation_id TEXT,
        json TEXT NOT NULL,
        input_items_json TEXT NOT NULL,
        events_json TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        updated_at INTEGER NOT NULL
      ) STRICT;
      CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL,
        metadata_json TEXT NOT NULL
      ) STRICT;
      CREATE TABLE conversation_items (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        item_id TEXT NOT NULL,
        json TEXT NOT NULL,
        PRIMARY KEY (conversation_id, seq),
        UNIQUE (conversation_id, item_id)
      ) STRICT;
    `,
  },
  {
    version: 2,
    description: 'virtual API keys and their usage counters',
    sql: `
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        name TEXT,
        models_json TEXT,
        rpm INTEGER,
        tpm INTEGER,
        budget_tokens INTEGER,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE TABLE api_key_usage (
        key_id TEXT PRIMARY KEY REFERENCES api_keys (id) ON DELETE CASCADE,
        requests INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0
      ) STRICT;
    `,
  },
  OWNERS_MIGRATION,
  replicaLeasesMigration('INTEGER', ' STRICT'),
];

export const POSTGRES_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'responses, conversations and conversation items',
    sql: `
      CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        created_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        model TEXT NOT NULL,
        previous_response_id TEXT,
        conversation_id TEXT,
        json TEXT NOT NULL,
        input_items_json TEXT NOT NULL,
        events_json TEXT,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
        updated_at BIGINT NOT NULL
      );
      CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        created_at BIGINT NOT NULL,
        metadata_json TEXT NOT NULL
      );
      CREATE TABLE conversation_items (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        item_id TEXT NOT NULL,
        json TEXT NOT NULL,
        PRIMARY KEY (conversation_id, seq),
        UNIQUE (conversation_id, item_id)
      );
    `,
  },
  {
    version: 2,
    description: 'virtual API keys and their usage counters',
    sql: `
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        name TEXT,
        models_json TEXT,
        rpm BIGINT,
        tpm BIGINT,
        budget_tokens BIGINT,
        created_at BIGINT NOT NULL
      );
      CREATE TABLE api_key_usage (
        key_id TEXT PRIMARY KEY REFERENCES api_keys (id) ON DELETE CASCADE,
        requests BIGINT NOT NULL DEFAULT 0,
        prompt_tokens BIGINT NOT NULL DEFAULT 0,
        completion_tokens BIGINT NOT NULL DEFAULT 0
      );
    `,
  },
  OWNERS_MIGRATION,
  replicaLeasesMigration('BIGINT', ''),
];

const CREATE_SCHEMA_MIGRATIONS = `
  CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    applied_at BIGINT NOT NULL
  )`;

/** Any constant works; it only has to be the same for every replica of the gateway. */
const POSTGRES_MIGRATION_LOCK_KEY = 5_105_157_400_001;

function pending(migrations: readonly Migration[], applied: readonly number[]): Migration[] {
  const done = new Set(applied);
  return [...migrations].sort((a, b) => a.version - b.version).filter((m) => !done.has(m.version));
}

/** Applies the pending SQLite migrations in one write transaction, so concurrent processes take turns. */
export function migrateSqlite(db: BetterSqlite3.Database): void {
  const run = db.transaction(() => {
    db.exec(CREATE_SCHEMA_MIGRATIONS);
    const applied = db.prepare<[], { version: number }>('SELECT version FROM schema_migrations').all();
    const record = db.prepare<[number, number]>(
      'INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)',
    );
    for (const migration of pending(
      SQLITE_MIGRATIONS,
      applied.map((row) => row.version),
    )) {
      db.exec(migration.sql);
      record.run(migration.version, Date.now());
    }
  });
  run.immediate();
}

/**
 * Applies the pending PostgreSQL migrations. The caller has opened a transaction on `client`;
 * the advisory lock is held until it ends, so replicas starting together apply each migration once
 * (concurrent `CREATE ... IF NOT EXISTS` is not safe in PostgreSQL without it).
 */
export async function migratePostgres(client: ClientBase, schema: string | undefined): Promise<void> {
  await client.query('SELECT pg_advisory_xact_lock($1)', [POSTGRES_MIGRATION_LOCK_KEY]);
  if (schema !== undefined) await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(schema)}`);
  await client.query(CREATE_SCHEMA_MIGRATIONS);
  const applied = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
  for (const migration of pending(
    POSTGRES_MIGRATIONS,
    applied.rows.map((row) => row.version),
  )) {
    await client.query(migration.sql);
    await client.query('INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)', [
      migration.version,
      Date.now(),
    ]);
  }
}

export function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}
