import { SEQ_ORDER } from './pagination.js';
import type { PageRequest } from './types.js';

export interface PostgresResponseRow {
  id: string;
  /** BIGINT arrives as a string. */
  created_at: string;
  status: string;
  model: string;
  previous_response_id: string | null;
  conversation_id: string | null;
  json: string;
  input_items_json: string;
  events_json: string | null;
  cancel_requested: boolean;
  owner_key_id: string | null;
  owner_replica_id: string | null;
}

export interface PostgresOrphanRow {
  id: string;
  owner_replica_id: string | null;
  json: string;
  events_json: string | null;
  /** BIGINT arrives as a string. */
  updated_at: string;
}

export interface PostgresConversationRow {
  id: string;
  created_at: string;
  metadata_json: string;
  owner_key_id: string | null;
}

export interface PostgresItemRow {
  item_id: string;
  json: string;
}

export interface PostgresKeyRow {
  id: string;
  name: string | null;
  hash: string;
  prefix: string;
  models_json: string | null;
  /** BIGINT columns arrive as strings. */
  rpm: string | null;
  tpm: string | null;
  budget_tokens: string | null;
  created_at: string;
}

export interface PostgresUsageRow {
  requests: string;
  prompt_tokens: string;
  completion_tokens: string;
}

const KEY_COLUMNS = 'id, name, hash, prefix, models_json, rpm, tpm, budget_tokens, created_at';

const RESPONSE_COLUMNS = `id, created_at, status, model, previous_response_id, conversation_id, json,
  input_items_json, events_json, cancel_requested, owner_key_id, owner_replica_id`;

/** A response that has not ended yet; every other status is final. */
const UNFINISHED = "status IN ('queued', 'in_progress')";

/** Leases are on the database's clock, so replicas on hosts whose clocks disagree still agree on them. */
const NOW_MS = '(extract(epoch FROM clock_timestamp()) * 1000)::bigint';
const LEASE_LIVE = `SELECT 1 FROM gateway_replicas AS g WHERE g.id = r.owner_replica_id AND g.expires_at > ${NOW_MS}`;

export const SQL = {
  insertResponse: `INSERT INTO responses (${RESPONSE_COLUMNS}, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
  // The status never moves backwards: an ended response is final, in_progress never turns queued.
  updateResponse: `UPDATE responses SET json = $2, status = $3, updated_at = $4,
    events_json = CASE WHEN $5::boolean THEN $6::text
      WHEN $7::text IS NULL THEN events_json
      WHEN events_json IS NULL OR events_json = '[]' THEN '[' || $7 || ']'
      ELSE left(events_json, -1) || ',' || $7 || ']' END
    WHERE id = $1 AND ${UNFINISHED} AND ($3 <> 'queued' OR status = 'queued')`,
  /** $1 replica id, $2 lease in ms. */
  renewLease: `INSERT INTO gateway_replicas (id, started_at, expires_at) VALUES ($1, ${NOW_MS}, ${NOW_MS} + $2)
    ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at`,
  dropLease: 'DELETE FROM gateway_replicas WHERE id = $1',
  forgetLapsed: `DELETE FROM gateway_replicas WHERE expires_at < ${NOW_MS} - $1`,
  /** $1 limit, $2 unowned-updated-before (Unix ms), $3 one response id or NULL. */
  listOrphans: `SELECT id, owner_replica_id, json, events_json, updated_at FROM responses AS r
    WHERE ${UNFINISHED} AND ($3::text IS NULL OR id = $3)
      AND CASE WHEN owner_replica_id IS NULL THEN updated_at < $2 ELSE NOT EXISTS (${LEASE_LIVE}) END
    ORDER BY created_at LIMIT $1`,
  /** $1 id, $2 owner, $3 updated_at as read, $4 now (ms), $5 json, $6 status, $7 events. */
  endOrphan: `UPDATE responses AS r SET json = $5, status = $6, events_json = $7, updated_at = $4
    WHERE id = $1 AND ${UNFINISHED} AND owner_replica_id IS NOT DISTINCT FROM $2::text AND updated_at = $3
      AND NOT EXISTS (${LEASE_LIVE})`,
  getResponse: `SELECT ${RESPONSE_COLUMNS} FROM responses WHERE id = $1`,
  deleteResponse: 'DELETE FROM responses WHERE id = $1',
  requestCancel: 'UPDATE responses SET cancel_requested = TRUE, updated_at = $2 WHERE id = $1',
  insertConversation:
    'INSERT INTO conversations (id, created_at, metadata_json, owner_key_id) VALUES ($1, $2, $3, $4)',
  getConversation: 'SELECT id, created_at, metadata_json, owner_key_id FROM conversations WHERE id = $1',
  updateConversationMetadata: 'UPDATE conversations SET metadata_json = $2 WHERE id = $1',
  deleteConversation: 'DELETE FROM conversations WHERE id = $1',
  conversationExists: 'SELECT 1 FROM conversations WHERE id = $1',
  // Appenders serialise on this row lock, so MAX(seq) cannot be read by two of them at once.
  lockConversation: 'SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE',
  /** $1 conversation id, $2 item ids, $3 item JSON texts (parallel arrays). */
  appendItems: `INSERT INTO conversation_items (conversation_id, seq, item_id, json)
    SELECT $1, last.seq + item.ordinality, item.id, item.json
    FROM (SELECT COALESCE(MAX(seq), 0) AS seq FROM conversation_items WHERE conversation_id = $1) AS last,
      unnest($2::text[], $3::text[]) WITH ORDINALITY AS item (id, json, ordinality)`,
  allItems: 'SELECT item_id, json FROM conversation_items WHERE conversation_id = $1 ORDER BY seq',
  getItem: 'SELECT item_id, json FROM conversation_items WHERE conversation_id = $1 AND item_id = $2',
  deleteItem: 'DELETE FROM conversation_items WHERE conversation_id = $1 AND item_id = $2',
  // One statement, so the key never exists without its usage row.
  insertKey: `WITH key AS (
      INSERT INTO api_keys (${KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id
    )
    INSERT INTO api_key_usage (key_id) SELECT id FROM key`,
  getKeyByHash: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE hash = $1`,
  getKey: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = $1`,
  listKeys: `SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`,
  deleteKey: 'DELETE FROM api_keys WHERE id = $1',
  // Increments in place under the row lock: concurrent writers from any replica queue, none is lost.
  addUsage: `UPDATE api_key_usage SET requests = requests + $2, prompt_tokens = prompt_tokens + $3,
    completion_tokens = completion_tokens + $4 WHERE key_id = $1`,
  getUsage: `SELECT COALESCE(u.requests, 0) AS requests, COALESCE(u.prompt_tokens, 0) AS prompt_tokens,
    COALESCE(u.completion_tokens, 0) AS completion_tokens
    FROM api_keys AS k LEFT JOIN api_key_usage AS u ON u.key_id = k.id WHERE k.id = $1`,
};

/** $1 conversation id, $2 limit, $3 the `after` item id (only with a cursor). */
export function pageSql(order: PageRequest['order'], withCursor: boolean): string {
  const { direction, beyond } = SEQ_ORDER[order];
  // An unknown `after` makes the subquery NULL, so the comparison matches nothing: an empty page.
  const cursor = withCursor
    ? `AND seq ${beyond} (SELECT seq FROM conversation_items WHERE conversation_id = $1 AND item_id = $3)`
    : '';
  return `SELECT item_id, json FROM conversation_items WHERE conversation_id = $1 ${cursor}
    ORDER BY seq ${direction} LIMIT $2`;
}
