import type Database from 'better-sqlite3';
import { SEQ_ORDER } from './pagination.js';
import type { PageRequest } from './types.js';

export interface SqliteResponseRow {
  id: string;
  created_at: number;
  status: string;
  model: string;
  previous_response_id: string | null;
  conversation_id: string | null;
  json: string;
  input_items_json: string;
  events_json: string | null;
  cancel_requested: number;
  owner_key_id: string | null;
  owner_replica_id: string | null;
}

export interface SqliteOrphanRow {
  id: string;
  owner_replica_id: string | null;
  json: string;
  events_json: string | null;
  updated_at: number;
}

export interface SqliteConversationRow {
  id: string;
  created_at: number;
  metadata_json: string;
  owner_key_id: string | null;
}

export interface SqliteItemRow {
  item_id: string;
  json: string;
}

export interface SqliteKeyRow {
  id: string;
  name: string | null;
  hash: string;
  prefix: string;
  models_json: string | null;
  rpm: number | null;
  tpm: number | null;
  budget_tokens: number | null;
  created_at: number;
}

export interface SqliteUsageRow {
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
}

interface KeyParams {
  id: string;
  name: string | null;
  hash: string;
  prefix: string;
  modelsJson: string | null;
  rpm: number | null;
  tpm: number | null;
  budgetTokens: number | null;
  createdAt: number;
}

interface UsageParams {
  id: string;
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

interface ResponseParams {
  id: string;
  createdAt: number;
  status: string;
  model: string;
  previousResponseId: string | null;
  conversationId: string | null;
  json: string;
  inputItemsJson: string;
  eventsJson: string | null;
  cancelRequested: number;
  ownerKeyId: string | null;
  ownerReplicaId: string | null;
  updatedAt: number;
}

interface LeaseParams {
  id: string;
  now: number;
  expiresAt: number;
}

interface OrphanQueryParams {
  id: string | null;
  now: number;
  unownedBefore: number;
  limit: number;
}

interface OrphanEndParams {
  id: string;
  owner: string | null;
  seenUpdatedAt: number;
  now: number;
  json: string;
  status: string;
  eventsJson: string | null;
}

interface ResponseUpdateParams {
  id: string;
  json: string;
  status: string;
  replaceEvents: number;
  eventsJson: string | null;
  appendEvents: string | null;
  updatedAt: number;
}

interface ItemParams {
  conversationId: string;
  seq: number;
  itemId: string;
  json: string;
}

const RESPONSE_COLUMNS = `id, created_at, status, model, previous_response_id, conversation_id, json,
  input_items_json, events_json, cancel_requested, owner_key_id, owner_replica_id`;

/** A response that has not ended yet; every other status is final. */
const UNFINISHED = "status IN ('queued', 'in_progress')";

const KEY_COLUMNS = 'id, name, hash, prefix, models_json, rpm, tpm, budget_tokens, created_at';

/** Every statement the SQLite store runs, prepared once (the tables must exist). */
export function prepareSqliteStatements(db: Database.Database) {
  return {
    insertResponse: db.prepare<ResponseParams>(
      `INSERT INTO responses (${RESPONSE_COLUMNS}, updated_at) VALUES (@id, @createdAt, @status, @model,
        @previousResponseId, @conversationId, @json, @inputItemsJson, @eventsJson, @cancelRequested, @ownerKeyId, @ownerReplicaId, @updatedAt)`,
    ),
    // The status never moves backwards: an ended response is final, in_progress never turns queued.
    updateResponse: db.prepare<ResponseUpdateParams>(
      `UPDATE responses SET json = @json, status = @status, updated_at = @updatedAt,
        events_json = CASE WHEN @replaceEvents = 1 THEN @eventsJson
          WHEN @appendEvents IS NULL THEN events_json
          WHEN events_json IS NULL OR events_json = '[]' THEN '[' || @appendEvents || ']'
          ELSE substr(events_json, 1, length(events_json) - 1) || ',' || @appendEvents || ']' END
        WHERE id = @id AND ${UNFINISHED} AND (@status <> 'queued' OR status = 'queued')`,
    ),
    getResponse: db.prepare<[string], SqliteResponseRow>(
      `SELECT ${RESPONSE_COLUMNS} FROM responses WHERE id = ?`,
    ),
    deleteResponse: db.prepare<[string]>('DELETE FROM responses WHERE id = ?'),
    requestCancel: db.prepare<[number, string]>(
      'UPDATE responses SET cancel_requested = 1, updated_at = ? WHERE id = ?',
    ),
    insertConversation: db.prepare<[string, number, string, string | null]>(
      'INSERT INTO conversations (id, created_at, metadata_json, owner_key_id) VALUES (?, ?, ?, ?)',
    ),
    getConversation: db.prepare<[string], SqliteConversationRow>(
      'SELECT id, created_at, metadata_json, owner_key_id FROM conversations WHERE id = ?',
    ),
    updateConversationMetadata: db.prepare<[string, string]>(
      'UPDATE conversations SET metadata_json = ? WHERE id = ?',
    ),
    deleteConversation: db.prepare<[string]>('DELETE FROM conversations WHERE id = ?'),
    conversationExists: db.prepare<[string], { found: number }>(
      'SELECT 1 AS found FROM conversations WHERE id = ?',
    ),
    lastSeq: db.prepare<[string], { seq: number }>(
      'SELECT COALESCE(MAX(seq), 0) AS seq FROM conversation_items WHERE conversation_id = ?',
    ),
    insertItem: db.prepare<ItemParams>(
      `INSERT INTO conversation_items (conversation_id, seq, item_id, json)
        VALUES (@conversationId, @seq, @itemId, @json)`,
    ),
    firstPage: pageStatements(db, false),
    pageAfter: pageStatements(db, true),
    allItems: db.prepare<[string], SqliteItemRow>(
      'SELECT item_id, json FROM conversation_items WHERE conversation_id = ? ORDER BY seq',
    ),
    getItem: db.prepare<[string, string], SqliteItemRow>(
      'SELECT item_id, json FROM conversation_items WHERE conversation_id = ? AND item_id = ?',
    ),
    deleteItem: db.prepare<[string, string]>(
      'DELETE FROM conversation_items WHERE conversation_id = ? AND item_id = ?',
    ),
    ...prepareKeyStatements(db),
    ...prepareLeaseStatements(db),
  };
}

/** Replica leases and the orphans of lapsed ones (times are Unix ms of this machine's clock). */
function prepareLeaseStatements(db: Database.Database) {
  const leaseLive =
    'SELECT 1 FROM gateway_replicas AS g WHERE g.id = r.owner_replica_id AND g.expires_at > @now';
  return {
    renewLease: db.prepare<LeaseParams>(
      `INSERT INTO gateway_replicas (id, started_at, expires_at) VALUES (@id, @now, @expiresAt)
        ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at`,
    ),
    dropLease: db.prepare<[string]>('DELETE FROM gateway_replicas WHERE id = ?'),
    forgetLapsed: db.prepare<[number]>('DELETE FROM gateway_replicas WHERE expires_at < ?'),
    listOrphans: db.prepare<OrphanQueryParams, SqliteOrphanRow>(
      `SELECT id, owner_replica_id, json, events_json, updated_at FROM responses AS r
        WHERE ${UNFINISHED} AND (@id IS NULL OR id = @id)
          AND CASE WHEN owner_replica_id IS NULL THEN updated_at < @unownedBefore
            ELSE NOT EXISTS (${leaseLive}) END
        ORDER BY created_at LIMIT @limit`,
    ),
    // Conditional on everything the sweeper read: two replicas (or a late owner) cannot both win.
    endOrphan: db.prepare<OrphanEndParams>(
      `UPDATE responses AS r SET json = @json, status = @status, events_json = @eventsJson, updated_at = @now
        WHERE id = @id AND ${UNFINISHED} AND owner_replica_id IS @owner AND updated_at = @seenUpdatedAt
          AND NOT EXISTS (${leaseLive})`,
    ),
  };
}

export type SqliteStatements = ReturnType<typeof prepareSqliteStatements>;

function prepareKeyStatements(db: Database.Database) {
  return {
    insertKey: db.prepare<KeyParams>(
      `INSERT INTO api_keys (${KEY_COLUMNS}) VALUES (@id, @name, @hash, @prefix, @modelsJson, @rpm, @tpm,
        @budgetTokens, @createdAt)`,
    ),
    insertKeyUsage: db.prepare<[string]>('INSERT INTO api_key_usage (key_id) VALUES (?)'),
    getKeyByHash: db.prepare<[string], SqliteKeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE hash = ?`),
    getKey: db.prepare<[string], SqliteKeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`),
    listKeys: db.prepare<[], SqliteKeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`),
    deleteKey: db.prepare<[string]>('DELETE FROM api_keys WHERE id = ?'),
    // One statement that increments in place: no read-modify-write for concurrent writers to race on.
    addUsage: db.prepare<UsageParams>(
      `UPDATE api_key_usage SET requests = requests + @requests,
        prompt_tokens = prompt_tokens + @promptTokens, completion_tokens = completion_tokens + @completionTokens
        WHERE key_id = @id`,
    ),
    getUsage: db.prepare<[string], SqliteUsageRow>(
      `SELECT COALESCE(u.requests, 0) AS requests, COALESCE(u.prompt_tokens, 0) AS prompt_tokens,
        COALESCE(u.completion_tokens, 0) AS completion_tokens
        FROM api_keys AS k LEFT JOIN api_key_usage AS u ON u.key_id = k.id WHERE k.id = ?`,
    ),
  };
}

interface PageParams {
  conversationId: string;
  after: string;
  limit: number;
}

function pageStatements(db: Database.Database, withCursor: boolean) {
  const statement = (order: PageRequest['order']) => {
    const { direction, beyond } = SEQ_ORDER[order];
    // An unknown `after` makes the subquery NULL, so the comparison matches nothing: an empty page.
    const cursor = withCursor
      ? `AND seq ${beyond} (SELECT seq FROM conversation_items
          WHERE conversation_id = @conversationId AND item_id = @after)`
      : '';
    return db.prepare<PageParams, SqliteItemRow>(
      `SELECT item_id, json FROM conversation_items WHERE conversation_id = @conversationId ${cursor}
        ORDER BY seq ${direction} LIMIT @limit`,
    );
  };
  return { asc: statement('asc'), desc: statement('desc') };
}
