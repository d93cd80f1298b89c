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
}

export interface PostgresConversationRow {
  id: string;
  created_at: string;
  metadata_json: string;
}

export interface PostgresItemRow {
  item_id: string;
  json: string;
}

const RESPONSE_COLUMNS = `id, created_at, status, model, previous_response_id, conversation_id, json,
  input_items_json, events_json, cancel_requested`;

export const SQL = {
  insertResponse: `INSERT INTO responses (${RESPONSE_COLUMNS}, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
  updateResponse: `UPDATE responses SET json = $2, status = $3, updated_at = $4,
    events_json = CASE WHEN $5::boolean THEN $6::text ELSE events_json END
    WHERE id = $1`,
  getResponse: `SELECT ${RESPONSE_COLUMNS} FROM responses WHERE id = $1`,
  deleteResponse: 'DELETE FROM responses WHERE id = $1',
  requestCancel: 'UPDATE responses SET cancel_requested = TRUE, updated_at = $2 WHERE id = $1',
  insertConversation: 'INSERT INTO conversations (id, created_at, metadata_json) VALUES ($1, $2, $3)',
  getConversation: 'SELECT id, created_at, metadata_json FROM conversations WHERE id = $1',
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
