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
}

export interface SqliteConversationRow {
  id: string;
  created_at: number;
  metadata_json: string;
}

export interface SqliteItemRow {
  item_id: string;
  json: string;
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
  updatedAt: number;
}

interface ResponseUpdateParams {
  id: string;
  json: string;
  status: string;
  replaceEvents: number;
  eventsJson: string | null;
  updatedAt: number;
}

interface ItemParams {
  conversationId: string;
  seq: number;
  itemId: string;
  json: string;
}

const RESPONSE_COLUMNS = `id, created_at, status, model, previous_response_id, conversation_id, json,
  input_items_json, events_json, cancel_requested`;

/** Every statement the SQLite store runs, prepared once (the tables must exist). */
export function prepareSqliteStatements(db: Database.Database) {
  return {
    insertResponse: db.prepare<ResponseParams>(
      `INSERT INTO responses (${RESPONSE_COLUMNS}, updated_at) VALUES (@id, @createdAt, @status, @model,
        @previousResponseId, @conversationId, @json, @inputItemsJson, @eventsJson, @cancelRequested, @updatedAt)`,
    ),
    updateResponse: db.prepare<ResponseUpdateParams>(
      `UPDATE responses SET json = @json, status = @status, updated_at = @updatedAt,
        events_json = CASE WHEN @replaceEvents = 1 THEN @eventsJson ELSE events_json END
        WHERE id = @id`,
    ),
    getResponse: db.prepare<[string], SqliteResponseRow>(
      `SELECT ${RESPONSE_COLUMNS} FROM responses WHERE id = ?`,
    ),
    deleteResponse: db.prepare<[string]>('DELETE FROM responses WHERE id = ?'),
    requestCancel: db.prepare<[number, string]>(
      'UPDATE responses SET cancel_requested = 1, updated_at = ? WHERE id = ?',
    ),
    insertConversation: db.prepare<[string, number, string]>(
      'INSERT INTO conversations (id, created_at, metadata_json) VALUES (?, ?, ?)',
    ),
    getConversation: db.prepare<[string], SqliteConversationRow>(
      'SELECT id, created_at, metadata_json FROM conversations WHERE id = ?',
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
  };
}

export type SqliteStatements = ReturnType<typeof prepareSqliteStatements>;

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
