import { ConversationGone } from '../errors/storage-errors.js';
import { changed, type PostgresConnection } from './postgres-connection.js';
import { lockAndAppend } from './postgres-conversations.js';
import { type PostgresResponseRow, SQL } from './postgres-sql.js';
import type { ResponseEnding, ResponseUpdate, StoredResponse } from './types.js';

/** The PostgreSQL store's responses: written, updated, ended (with their conversation), read and cancelled. */

export async function insertResponse(db: PostgresConnection, response: StoredResponse): Promise<void> {
  await db.query('insertResponse', SQL.insertResponse, insertValues(response));
}

export async function updateResponse(
  db: PostgresConnection,
  id: string,
  update: ResponseUpdate,
): Promise<boolean> {
  return changed(await db.query('updateResponse', SQL.updateResponse, updateValues(id, update)));
}

export async function finishResponse(db: PostgresConnection, ending: ResponseEnding): Promise<boolean> {
  return db.transaction('finishResponse', async (client) => {
    if (ending.insert) await client.query(SQL.insertResponse, insertValues(ending.insert));
    if (
      ending.update &&
      !changed(await client.query(SQL.updateResponse, updateValues(ending.update.id, ending.update)))
    )
      return false;
    const conversation = ending.conversation;
    if (conversation && !(await lockAndAppend(client, conversation.id, conversation.items)))
      throw new ConversationGone(conversation.id);
    return true;
  });
}

export async function getResponse(db: PostgresConnection, id: string): Promise<StoredResponse | undefined> {
  const { rows } = await db.query<PostgresResponseRow>('getResponse', SQL.getResponse, [id]);
  return rows[0] && toStoredResponse(rows[0]);
}

export async function deleteResponse(db: PostgresConnection, id: string): Promise<boolean> {
  return changed(await db.query('deleteResponse', SQL.deleteResponse, [id]));
}

export async function requestCancel(db: PostgresConnection, id: string): Promise<boolean> {
  return changed(await db.query('requestCancel', SQL.requestCancel, [id, Date.now()]));
}

function insertValues(response: StoredResponse): unknown[] {
  return [
    response.id,
    response.createdAt,
    response.status,
    response.model,
    response.previousResponseId,
    response.conversationId,
    response.json,
    response.inputItemsJson,
    response.eventsJson,
    response.cancelRequested,
    response.ownerKeyId,
    response.ownerReplicaId ?? null,
    Date.now(),
  ];
}

function updateValues(id: string, update: ResponseUpdate): unknown[] {
  const replaceEvents = update.eventsJson !== undefined;
  return [
    id,
    update.json,
    update.status,
    Date.now(),
    replaceEvents,
    update.eventsJson ?? null,
    update.appendEventsJson ?? null,
  ];
}

function toStoredResponse(row: PostgresResponseRow): StoredResponse {
  return {
    id: row.id,
    json: row.json,
    status: row.status,
    model: row.model,
    createdAt: Number(row.created_at),
    previousResponseId: row.previous_response_id,
    conversationId: row.conversation_id,
    inputItemsJson: row.input_items_json,
    eventsJson: row.events_json,
    cancelRequested: row.cancel_requested,
    ownerKeyId: row.owner_key_id,
    ownerReplicaId: row.owner_replica_id,
  };
}
