import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { ConversationGone } from '../errors/storage-errors.js';
import { fromSqliteError, storeError } from './error-mapping.js';
import { migrateSqlite } from './migrations.js';
import { toPage } from './pagination.js';
import {
  prepareSqliteStatements,
  type SqliteItemRow,
  type SqliteKeyRow,
  type SqliteResponseRow,
  type SqliteStatements,
} from './sqlite-statements.js';
import {
  type KeyStore,
  modelsFromJson,
  modelsToJson,
  type OrphanedResponse,
  type OrphanQuery,
  type Page,
  type PageRequest,
  type ResponseEnding,
  type ResponseUpdate,
  type Store,
  type StoredApiKey,
  type StoredConversation,
  type StoredItem,
  type StoredKeyUsage,
  type StoredResponse,
} from './types.js';

export interface SqliteStoreOptions {
  /** How long a write waits for another process's write lock before failing, in ms. */
  busyTimeoutMs?: number | undefined;
}

/**
 * The embedded store's database work. better-sqlite3 is synchronous, so every method finishes
 * its work before returning its promise: this class runs on the storage thread
 * (`sqlite-thread.ts`), and the gateway uses it through `SqliteStore`, which forwards every
 * method of this class to that thread. Several processes may share the file (WAL, busy_timeout).
 */
export class SqliteSyncStore implements Store, KeyStore {
  readonly kind = 'sqlite' as const;
  private readonly db: Database.Database;
  private prepared: Prepared | undefined;
  private readonly busyTimeoutMs: number;
  /** The busy_timeout in force (lowered for a call that has less of its budget left). */
  private busyNowMs: number;

  constructor(path: string, options: SqliteStoreOptions = {}) {
    this.busyTimeoutMs = Math.trunc(options.busyTimeoutMs ?? 5000);
    this.busyNowMs = this.busyTimeoutMs;
    try {
      if (path !== ':memory:' && path !== '') mkdirSync(dirname(path), { recursive: true });
      this.db = new Database(path);
      // busy_timeout first: switching to WAL needs a lock that another process may hold.
      this.db.pragma(`busy_timeout = ${this.busyTimeoutMs}`);
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('foreign_keys = ON');
    } catch (err) {
      throw fromSqliteError('open', err);
    }
  }

  /**
   * The next call waits for another process's lock only until `deadline` (Unix ms), never past
   * the busy timeout: the storage thread gives each call what is left of its budget after its
   * wait in the queue. Static, so that it is not a store method the thread forwards.
   */
  static waitForLocksUntil(store: SqliteSyncStore, deadline: number): void {
    const ms = Math.max(1, Math.min(store.busyTimeoutMs, Math.trunc(deadline - Date.now())));
    if (ms === store.busyNowMs || !store.db.open) return;
    store.db.pragma(`busy_timeout = ${ms}`);
    store.busyNowMs = ms;
  }

  async migrate(): Promise<void> {
    this.run('migrate', () => {
      migrateSqlite(this.db);
      this.prepared ??= prepare(this.db);
    });
  }

  async close(): Promise<void> {
    this.prepared = undefined;
    this.run('close', () => this.db.close());
  }

  async insertResponse(response: StoredResponse): Promise<void> {
    this.withPrepared('insertResponse', ({ statements }) => {
      statements.insertResponse.run(responseParams(response));
    });
  }

  async updateResponse(id: string, update: ResponseUpdate): Promise<boolean> {
    return this.withPrepared(
      'updateResponse',
      ({ statements }) => statements.updateResponse.run(updateParams(id, update)).changes > 0,
    );
  }

  async finishResponse(ending: ResponseEnding): Promise<boolean> {
    return this.withPrepared('finishResponse', ({ finishResponse }) => finishResponse.immediate(ending));
  }

  async renewReplicaLease(replicaId: string, leaseMs: number): Promise<void> {
    this.withPrepared('renewReplicaLease', ({ statements }) => {
      const now = Date.now();
      statements.renewLease.run({ id: replicaId, now, expiresAt: now + leaseMs });
    });
  }

  async dropReplicaLease(replicaId: string): Promise<void> {
    this.withPrepared('dropReplicaLease', ({ statements }) => statements.dropLease.run(replicaId));
  }

  async forgetLapsedReplicas(olderThanMs: number): Promise<number> {
    return this.withPrepared(
      'forgetLapsedReplicas',
      ({ statements }) => statements.forgetLapsed.run(Date.now() - olderThanMs).changes,
    );
  }

  async listOrphanedResponses(query: OrphanQuery): Promise<OrphanedResponse[]> {
    return this.withPrepared('listOrphanedResponses', ({ statements }) =>
      statements.listOrphans
        .all({
          id: query.id ?? null,
          now: Date.now(),
          unownedBefore: query.unownedUpdatedBefore,
          limit: query.limit,
        })
        .map((row) => ({
          id: row.id,
          ownerReplicaId: row.owner_replica_id,
          json: row.json,
          eventsJson: row.events_json,
          updatedAt: row.updated_at,
        })),
    );
  }

  async endOrphanedResponse(orphan: OrphanedResponse, update: ResponseUpdate): Promise<boolean> {
    return this.withPrepared('endOrphanedResponse', ({ statements }) => {
      const params = {
        id: orphan.id,
        owner: orphan.ownerReplicaId,
        seenUpdatedAt: orphan.updatedAt,
        now: Date.now(),
        json: update.json,
        status: update.status,
        eventsJson: update.eventsJson ?? null,
      };
      return statements.endOrphan.run(params).changes > 0;
    });
  }

  async getResponse(id: string): Promise<StoredResponse | undefined> {
    return this.withPrepared('getResponse', ({ statements }) => {
      const row = statements.getResponse.get(id);
      return row && toStoredResponse(row);
    });
  }

  async deleteResponse(id: string): Promise<boolean> {
    return this.withPrepared(
      'deleteResponse',
      ({ statements }) => statements.deleteResponse.run(id).changes > 0,
    );
  }

  async requestCancel(id: string): Promise<boolean> {
    return this.withPrepared(
      'requestCancel',
      ({ statements }) => statements.requestCancel.run(Date.now(), id).changes > 0,
    );
  }

  async insertConversation(conversation: StoredConversation, items: readonly StoredItem[]): Promise<void> {
    this.withPrepared('insertConversation', ({ insertConversation }) =>
      insertConversation.immediate(conversation, items),
    );
  }

  async getConversation(id: string): Promise<StoredConversation | undefined> {
    return this.withPrepared('getConversation', ({ statements }) => {
      const row = statements.getConversation.get(id);
      return (
        row && {
          id: row.id,
          createdAt: row.created_at,
          metadataJson: row.metadata_json,
          ownerKeyId: row.owner_key_id,
        }
      );
    });
  }

  async updateConversationMetadata(id: string, metadataJson: string): Promise<boolean> {
    return this.withPrepared(
      'updateConversationMetadata',
      ({ statements }) => statements.updateConversationMetadata.run(metadataJson, id).changes > 0,
    );
  }

  async deleteConversation(id: string): Promise<boolean> {
    return this.withPrepared(
      'deleteConversation',
      ({ statements }) => statements.deleteConversation.run(id).changes > 0,
    );
  }

  async appendConversationItems(id: string, items: readonly StoredItem[]): Promise<boolean> {
    return this.withPrepared('appendConversationItems', ({ appendItems }) =>
      appendItems.immediate(id, items),
    );
  }

  async listConversationItems(id: string, page: PageRequest): Promise<Page<StoredItem> | undefined> {
    return this.withPrepared('listConversationItems', ({ listItems }) => listItems.deferred(id, page));
  }

  async allConversationItems(id: string): Promise<StoredItem[] | undefined> {
    return this.withPrepared('allConversationItems', ({ allItems }) => allItems.deferred(id));
  }

  async getConversationItem(conversationId: string, itemId: string): Promise<StoredItem | undefined> {
    return this.withPrepared('getConversationItem', ({ statements }) => {
      const row = statements.getItem.get(conversationId, itemId);
      return row && toStoredItem(row);
    });
  }

  async deleteConversationItem(conversationId: string, itemId: string): Promise<boolean> {
    return this.withPrepared(
      'deleteConversationItem',
      ({ statements }) => statements.deleteItem.run(conversationId, itemId).changes > 0,
    );
  }

  async insertKey(key: StoredApiKey): Promise<void> {
    this.withPrepared('insertKey', ({ insertKey }) => insertKey.immediate(key));
  }

  async getKeyByHash(hash: string): Promise<StoredApiKey | undefined> {
    return this.withPrepared('getKeyByHash', ({ statements }) => {
      const row = statements.getKeyByHash.get(hash);
      return row && toStoredApiKey(row);
    });
  }

  async getKey(id: string): Promise<StoredApiKey | undefined> {
    return this.withPrepared('getKey', ({ statements }) => {
      const row = statements.getKey.get(id);
      return row && toStoredApiKey(row);
    });
  }

  /** Every row of one table as stored, past the API (operators' checks, tests of what is really kept). */
  async dumpTable(
    table: 'responses' | 'conversations' | 'conversation_items',
  ): Promise<Record<string, unknown>[]> {
    if (table !== 'responses' && table !== 'conversations' && table !== 'conversation_items') {
      throw new TypeError(`not a table of the store: ${String(table)}`);
    }
    return this.run(
      'dumpTable',
      () => this.db.prepare(`SELECT * FROM ${table}`).all() as Record<string, unknown>[],
    );
  }

  async listKeys(): Promise<StoredApiKey[]> {
    return this.withPrepared('listKeys', ({ statements }) => statements.listKeys.all().map(toStoredApiKey));
  }

  async deleteKey(id: string): Promise<boolean> {
    return this.withPrepared('deleteKey', ({ statements }) => statements.deleteKey.run(id).changes > 0);
  }

  async addUsage(
    id: string,
    requests: number,
    promptTokens: number,
    completionTokens: number,
  ): Promise<boolean> {
    return this.withPrepared('addUsage', ({ statements }) => {
      const params = { id, requests, promptTokens, completionTokens };
      return statements.addUsage.run(params).changes > 0;
    });
  }

  async getUsage(id: string): Promise<StoredKeyUsage | undefined> {
    return this.withPrepared('getUsage', ({ statements }) => {
      const row = statements.getUsage.get(id);
      return (
        row && {
          requests: row.requests,
          promptTokens: row.prompt_tokens,
          completionTokens: row.completion_tokens,
        }
      );
    });
  }

  private run<T>(operation: string, work: () => T): T {
    try {
      return work();
    } catch (err) {
      throw fromSqliteError(operation, err);
    }
  }

  private withPrepared<T>(operation: string, work: (prepared: Prepared) => T): T {
    return this.run(operation, () => {
      if (this.prepared === undefined) throw storeError(operation, 'store_error', new Error('not migrated'));
      return work(this.prepared);
    });
  }
}

type Prepared = ReturnType<typeof prepare>;

/** The statements and the multi-statement transactions, built once after the schema exists. */
function prepare(db: Database.Database) {
  const statements = prepareSqliteStatements(db);
  return {
    statements,
    insertConversation: db.transaction((conversation: StoredConversation, items: readonly StoredItem[]) => {
      statements.insertConversation.run(
        conversation.id,
        conversation.createdAt,
        conversation.metadataJson,
        conversation.ownerKeyId,
      );
      insertItems(statements, conversation.id, 0, items);
    }),
    // Immediate: the write lock is taken before reading MAX(seq), so another process cannot interleave.
    appendItems: db.transaction((id: string, items: readonly StoredItem[]) => {
      if (statements.conversationExists.get(id) === undefined) return false;
      insertItems(statements, id, statements.lastSeq.get(id)?.seq ?? 0, items);
      return true;
    }),
    // Read transactions, so the items and the existence check see one snapshot.
    listItems: db.transaction((id: string, page: PageRequest) => {
      const params = { conversationId: id, after: page.after ?? '', limit: page.limit + 1 };
      const pageStatements = page.after === undefined ? statements.firstPage : statements.pageAfter;
      const rows = pageStatements[page.order].all(params);
      if (rows.length === 0 && statements.conversationExists.get(id) === undefined) return undefined;
      return toPage(rows.map(toStoredItem), page.limit);
    }),
    // Immediate: the response's end and its conversation append are one write, or neither is.
    finishResponse: db.transaction((ending: ResponseEnding) => {
      if (ending.insert) statements.insertResponse.run(responseParams(ending.insert));
      if (
        ending.update &&
        statements.updateResponse.run(updateParams(ending.update.id, ending.update)).changes === 0
      )
        return false;
      const conversation = ending.conversation;
      if (conversation) {
        if (statements.conversationExists.get(conversation.id) === undefined)
          throw new ConversationGone(conversation.id);
        insertItems(
          statements,
          conversation.id,
          statements.lastSeq.get(conversation.id)?.seq ?? 0,
          conversation.items,
        );
      }
      return true;
    }),
    insertKey: db.transaction((key: StoredApiKey) => {
      statements.insertKey.run({ ...key, modelsJson: modelsToJson(key.models) });
      statements.insertKeyUsage.run(key.id);
    }),
    allItems: db.transaction((id: string) => {
      const rows = statements.allItems.all(id);
      if (rows.length === 0 && statements.conversationExists.get(id) === undefined) return undefined;
      return rows.map(toStoredItem);
    }),
  };
}

function responseParams(response: StoredResponse) {
  return {
    ...response,
    cancelRequested: response.cancelRequested ? 1 : 0,
    ownerReplicaId: response.ownerReplicaId ?? null,
    updatedAt: Date.now(),
  };
}

function updateParams(id: string, update: ResponseUpdate) {
  return {
    id,
    json: update.json,
    status: update.status,
    replaceEvents: update.eventsJson !== undefined ? 1 : 0,
    eventsJson: update.eventsJson ?? null,
    appendEvents: update.appendEventsJson ?? null,
    updatedAt: Date.now(),
  };
}

function insertItems(
  statements: SqliteStatements,
  conversationId: string,
  lastSeq: number,
  items: readonly StoredItem[],
): void {
  items.forEach((item, index) => {
    statements.insertItem.run({ conversationId, seq: lastSeq + index + 1, itemId: item.id, json: item.json });
  });
}

function toStoredResponse(row: SqliteResponseRow): StoredResponse {
  return {
    id: row.id,
    json: row.json,
    status: row.status,
    model: row.model,
    createdAt: row.created_at,
    previousResponseId: row.previous_response_id,
    conversationId: row.conversation_id,
    inputItemsJson: row.input_items_json,
    eventsJson: row.events_json,
    cancelRequested: row.cancel_requested !== 0,
    ownerKeyId: row.owner_key_id,
    ownerReplicaId: row.owner_replica_id,
  };
}

function toStoredApiKey(row: SqliteKeyRow): StoredApiKey {
  return {
    id: row.id,
    name: row.name,
    hash: row.hash,
    prefix: row.prefix,
    models: modelsFromJson(row.models_json),
    rpm: row.rpm,
    tpm: row.tpm,
    budgetTokens: row.budget_tokens,
    createdAt: row.created_at,
  };
}

function toStoredItem(row: SqliteItemRow): StoredItem {
  return { id: row.item_id, json: row.json };
}
