import type pg from 'pg';
import { toPage } from './pagination.js';
import { changed, type PostgresConnection } from './postgres-connection.js';
import { type PostgresConversationRow, type PostgresItemRow, pageSql, SQL } from './postgres-sql.js';
import type { Page, PageRequest, StoredConversation, StoredItem } from './types.js';

/** The PostgreSQL store's conversations and their items. */

export async function insertConversation(
  db: PostgresConnection,
  conversation: StoredConversation,
  items: readonly StoredItem[],
): Promise<void> {
  await db.transaction('insertConversation', async (client) => {
    const { id, createdAt, metadataJson, ownerKeyId } = conversation;
    await client.query(SQL.insertConversation, [id, createdAt, metadataJson, ownerKeyId]);
    if (items.length > 0) await client.query(SQL.appendItems, appendValues(id, items));
  });
}

export async function getConversation(
  db: PostgresConnection,
  id: string,
): Promise<StoredConversation | undefined> {
  const { rows } = await db.query<PostgresConversationRow>('getConversation', SQL.getConversation, [id]);
  const row = rows[0];
  return (
    row && {
      id: row.id,
      createdAt: Number(row.created_at),
      metadataJson: row.metadata_json,
      ownerKeyId: row.owner_key_id,
    }
  );
}

export async function updateConversationMetadata(
  db: PostgresConnection,
  id: string,
  metadataJson: string,
): Promise<boolean> {
  const values = [id, metadataJson];
  return changed(await db.query('updateConversationMetadata', SQL.updateConversationMetadata, values));
}

export async function deleteConversation(db: PostgresConnection, id: string): Promise<boolean> {
  return changed(await db.query('deleteConversation', SQL.deleteConversation, [id]));
}

export async function appendConversationItems(
  db: PostgresConnection,
  id: string,
  items: readonly StoredItem[],
): Promise<boolean> {
  return db.transaction('appendConversationItems', (client) => lockAndAppend(client, id, items));
}

/**
 * Within a transaction: locks the conversation's row (appends to one conversation take turns),
 * then appends `items` after its last one. False, with nothing appended, when it is gone.
 */
export async function lockAndAppend(
  client: pg.PoolClient,
  id: string,
  items: readonly StoredItem[],
): Promise<boolean> {
  const locked = await client.query(SQL.lockConversation, [id]);
  if (!changed(locked)) return false;
  if (items.length > 0) await client.query(SQL.appendItems, appendValues(id, items));
  return true;
}

export async function listConversationItems(
  db: PostgresConnection,
  id: string,
  page: PageRequest,
): Promise<Page<StoredItem> | undefined> {
  const withCursor = page.after !== undefined;
  const values = withCursor ? [id, page.limit + 1, page.after] : [id, page.limit + 1];
  const sql = pageSql(page.order, withCursor);
  const { rows } = await db.query<PostgresItemRow>('listConversationItems', sql, values);
  if (rows.length === 0 && !(await conversationExists(db, 'listConversationItems', id))) return undefined;
  return toPage(rows.map(toStoredItem), page.limit);
}

export async function allConversationItems(
  db: PostgresConnection,
  id: string,
): Promise<StoredItem[] | undefined> {
  const { rows } = await db.query<PostgresItemRow>('allConversationItems', SQL.allItems, [id]);
  if (rows.length === 0 && !(await conversationExists(db, 'allConversationItems', id))) return undefined;
  return rows.map(toStoredItem);
}

export async function getConversationItem(
  db: PostgresConnection,
  conversationId: string,
  itemId: string,
): Promise<StoredItem | undefined> {
  const values = [conversationId, itemId];
  const { rows } = await db.query<PostgresItemRow>('getConversationItem', SQL.getItem, values);
  return rows[0] && toStoredItem(rows[0]);
}

export async function deleteConversationItem(
  db: PostgresConnection,
  conversationId: string,
  itemId: string,
): Promise<boolean> {
  return changed(await db.query('deleteConversationItem', SQL.deleteItem, [conversationId, itemId]));
}

async function conversationExists(db: PostgresConnection, operation: string, id: string): Promise<boolean> {
  return changed(await db.query(operation, SQL.conversationExists, [id]));
}

function appendValues(id: string, items: readonly StoredItem[]): unknown[] {
  return [id, items.map((item) => item.id), items.map((item) => item.json)];
}

function toStoredItem(row: PostgresItemRow): StoredItem {
  return { id: row.item_id, json: row.json };
}
