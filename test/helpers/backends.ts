import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { SluiceConfigInput } from '../../src/config/schema.js';

/** PostgreSQL of this machine (trust auth); CI starts it when it is down. */
export const POSTGRES_URL = process.env.SLUICE_TEST_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';

/** Redis of this machine; CI starts it when it is down. */
export const REDIS_URL = process.env.SLUICE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export interface Backend {
  name: 'sqlite' | 'postgres';
  storage(): SluiceConfigInput['storage'];
  /** Drops what the suite created. */
  cleanup(): Promise<void>;
}

/** The storage backends a suite runs against: SQLite in memory, and PostgreSQL in a schema of its own. */
export function backends(): Backend[] {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  return [
    { name: 'sqlite', storage: () => ({ kind: 'sqlite', path: ':memory:' }), cleanup: async () => {} },
    {
      name: 'postgres',
      storage: () => ({ kind: 'postgres', url: POSTGRES_URL, schema }),
      cleanup: async () => {
        const client = new pg.Client({ connectionString: POSTGRES_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await client.end();
      },
    },
  ];
}

/**
 * Reads the rows of a table straight from a running gateway's store (SQLite or PostgreSQL),
 * bypassing the API: what is really stored, not what a route chooses to answer.
 */
export async function storedRows(
  store: unknown,
  table: 'responses' | 'conversations' | 'conversation_items',
): Promise<Record<string, unknown>[]> {
  // Both stores read their own tables (SQLite on its thread, PostgreSQL in its schema).
  const internals = store as { dumpTable(name: typeof table): Promise<Record<string, unknown>[]> };
  return internals.dumpTable(table);
}
