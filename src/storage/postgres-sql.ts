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
  input_items_json, events_json, cancel_requested, owner_key_id`;

export const SQL = {
  insertResponse: `INSERT INTO responses (${RESPONSE_COLUMNS}, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
  updateResponse: `UPDATE responses SET json = $2, status = $3, updated_at = $4,
    events_json = CASE WHEN $5::boolean THEN $6::text ELSE events_json END
    WHERE id = $1`,
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
