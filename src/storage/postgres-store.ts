import { migratePostgres } from './migrations.js';
import { PostgresConnection, type PostgresConnectionOptions } from './postgres-connection.js';
import * as conversations from './postgres-conversations.js';
import * as keys from './postgres-keys.js';
import * as leases from './postgres-leases.js';
import * as responses from './postgres-responses.js';
import type {
  KeyStore,
  OrphanedResponse,
  OrphanQuery,
  Page,
  PageRequest,
  ResponseEnding,
  ResponseUpdate,
  Store,
  StoredApiKey,
  StoredConversation,
  StoredItem,
  StoredKeyUsage,
  StoredResponse,
} from './types.js';

export type PostgresStoreOptions = PostgresConnectionOptions;

/**
 * The shared store for several gateway replicas. Its statements live by what they keep:
 * postgres-responses.ts, postgres-conversations.ts, postgres-keys.ts, postgres-leases.ts; the
 * pool, retries and bounds they run under in postgres-connection.ts.
 */
export class PostgresStore implements Store, KeyStore {
  readonly kind = 'postgres' as const;
  private readonly db: PostgresConnection;

  constructor(url: string, options: PostgresStoreOptions = {}) {
    this.db = new PostgresConnection(url, options);
  }

  /** Every row of one table as stored, past the API (operators' checks, tests of what is really kept). */
  async dumpTable(
    table: 'responses' | 'conversations' | 'conversation_items',
  ): Promise<Record<string, unknown>[]> {
    if (table !== 'responses' && table !== 'conversations' && table !== 'conversation_items') {
      throw new TypeError(`not a table of the store: ${String(table)}`);
    }
    return (await this.db.query<Record<string, unknown>>('dumpTable', `SELECT * FROM ${table}`, [])).rows;
  }

  async migrate(): Promise<void> {
    await this.db.transaction('migrate', (client) => migratePostgres(client, this.db.schema));
  }

  close(): Promise<void> {
    return this.db.close();
  }

  insertResponse(response: StoredResponse): Promise<void> {
    return responses.insertResponse(this.db, response);
  }

  updateResponse(id: string, update: ResponseUpdate): Promise<boolean> {
    return responses.updateResponse(this.db, id, update);
  }

  finishResponse(ending: ResponseEnding): Promise<boolean> {
    return responses.finishResponse(this.db, ending);
  }

  getResponse(id: string): Promise<StoredResponse | undefined> {
    return responses.getResponse(this.db, id);
  }

  deleteResponse(id: string): Promise<boolean> {
    return responses.deleteResponse(this.db, id);
  }

  requestCancel(id: string): Promise<boolean> {
    return responses.requestCancel(this.db, id);
  }

  renewReplicaLease(replicaId: string, leaseMs: number): Promise<void> {
    return leases.renewReplicaLease(this.db, replicaId, leaseMs);
  }

  dropReplicaLease(replicaId: string): Promise<void> {
    return leases.dropReplicaLease(this.db, replicaId);
  }

  forgetLapsedReplicas(olderThanMs: number): Promise<number> {
    return leases.forgetLapsedReplicas(this.db, olderThanMs);
  }

  listOrphanedResponses(query: OrphanQuery): Promise<OrphanedResponse[]> {
    return leases.listOrphanedResponses(this.db, query);
  }

  endOrphanedResponse(orphan: OrphanedResponse, update: ResponseUpdate): Promise<boolean> {
    return leases.endOrphanedResponse(this.db, orphan, update);
  }

  insertConversation(conversation: StoredConversation, items: readonly StoredItem[]): Promise<void> {
    return conversations.insertConversation(this.db, conversation, items);
  }

  getConversation(id: string): Promise<StoredConversation | undefined> {
    return conversations.getConversation(this.db, id);
  }

  updateConversationMetadata(id: string, metadataJson: string): Promise<boolean> {
    return conversations.updateConversationMetadata(this.db, id, metadataJson);
  }

  deleteConversation(id: string): Promise<boolean> {
    return conversations.deleteConversation(this.db, id);
  }

  appendConversationItems(id: string, items: readonly StoredItem[]): Promise<boolean> {
    return conversations.appendConversationItems(this.db, id, items);
  }

  listConversationItems(id: string, page: PageRequest): Promise<Page<StoredItem> | undefined> {
    return conversations.listConversationItems(this.db, id, page);
  }

  allConversationItems(id: string): Promise<StoredItem[] | undefined> {
    return conversations.allConversationItems(this.db, id);
  }

  getConversationItem(conversationId: string, itemId: string): Promise<StoredItem | undefined> {
    return conversations.getConversationItem(this.db, conversationId, itemId);
  }

  deleteConversationItem(conversationId: string, itemId: string): Promise<boolean> {
    return conversations.deleteConversationItem(this.db, conversationId, itemId);
  }

  insertKey(key: StoredApiKey): Promise<void> {
    return keys.insertKey(this.db, key);
  }

  getKeyByHash(hash: string): Promise<StoredApiKey | undefined> {
    return keys.getKeyByHash(this.db, hash);
  }

  getKey(id: string): Promise<StoredApiKey | undefined> {
    return keys.getKey(this.db, id);
  }

  listKeys(): Promise<StoredApiKey[]> {
    return keys.listKeys(this.db);
  }

  deleteKey(id: string): Promise<boolean> {
    return keys.deleteKey(this.db, id);
  }

  addUsage(id: string, requests: number, promptTokens: number, completionTokens: number): Promise<boolean> {
    return keys.addUsage(this.db, id, requests, promptTokens, completionTokens);
  }

  getUsage(id: string): Promise<StoredKeyUsage | undefined> {
    return keys.getUsage(this.db, id);
  }
}
