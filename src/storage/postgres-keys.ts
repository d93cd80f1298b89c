import { changed, type PostgresConnection } from './postgres-connection.js';
import { type PostgresKeyRow, type PostgresUsageRow, SQL } from './postgres-sql.js';
import { modelsFromJson, modelsToJson, type StoredApiKey, type StoredKeyUsage } from './types.js';

/** The PostgreSQL store's API keys and the usage counted against each. */

export async function insertKey(db: PostgresConnection, key: StoredApiKey): Promise<void> {
  await db.query('insertKey', SQL.insertKey, [
    key.id,
    key.name,
    key.hash,
    key.prefix,
    modelsToJson(key.models),
    key.rpm,
    key.tpm,
    key.budgetTokens,
    key.createdAt,
  ]);
}

export async function getKeyByHash(db: PostgresConnection, hash: string): Promise<StoredApiKey | undefined> {
  const { rows } = await db.query<PostgresKeyRow>('getKeyByHash', SQL.getKeyByHash, [hash]);
  return rows[0] && toStoredApiKey(rows[0]);
}

export async function getKey(db: PostgresConnection, id: string): Promise<StoredApiKey | undefined> {
  const { rows } = await db.query<PostgresKeyRow>('getKey', SQL.getKey, [id]);
  return rows[0] && toStoredApiKey(rows[0]);
}

export async function listKeys(db: PostgresConnection): Promise<StoredApiKey[]> {
  const { rows } = await db.query<PostgresKeyRow>('listKeys', SQL.listKeys, []);
  return rows.map(toStoredApiKey);
}

export async function deleteKey(db: PostgresConnection, id: string): Promise<boolean> {
  return changed(await db.query('deleteKey', SQL.deleteKey, [id]));
}

export async function addUsage(
  db: PostgresConnection,
  id: string,
  requests: number,
  promptTokens: number,
  completionTokens: number,
): Promise<boolean> {
  const values = [id, requests, promptTokens, completionTokens];
  return changed(await db.query('addUsage', SQL.addUsage, values));
}

export async function getUsage(db: PostgresConnection, id: string): Promise<StoredKeyUsage | undefined> {
  const { rows } = await db.query<PostgresUsageRow>('getUsage', SQL.getUsage, [id]);
  const row = rows[0];
  return (
    row && {
      requests: Number(row.requests),
      promptTokens: Number(row.prompt_tokens),
      completionTokens: Number(row.completion_tokens),
    }
  );
}

function toStoredApiKey(row: PostgresKeyRow): StoredApiKey {
  return {
    id: row.id,
    name: row.name,
    hash: row.hash,
    prefix: row.prefix,
    models: modelsFromJson(row.models_json),
    rpm: nullableNumber(row.rpm),
    tpm: nullableNumber(row.tpm),
    budgetTokens: nullableNumber(row.budget_tokens),
    createdAt: Number(row.created_at),
  };
}

function nullableNumber(value: string | null): number | null {
  return value === null ? null : Number(value);
}
