import pg from 'pg';
import { ConversationGone } from '../errors/storage-errors.js';
import { fromPostgresError } from './error-mapping.js';
import { migratePostgres } from './migrations.js';
import { toPage } from './pagination.js';
import { type RetryWindows, withRetry } from './postgres-retry.js';
import {
  type PostgresConversationRow,
  type PostgresItemRow,
  type PostgresKeyRow,
  type PostgresOrphanRow,
  type PostgresResponseRow,
  type PostgresUsageRow,
  pageSql,
  SQL,
} from './postgres-sql.js';
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

export interface PostgresStoreOptions {
  /** Schema holding the tables, created by migrate() if missing; used as the connections' search_path. */
  schema?: string | undefined;
  /** How long to wait for a connection before failing with store_unavailable, in ms. */
  connectionTimeoutMillis?: number | undefined;
  maxConnections?: number | undefined;
  /** How long a write keeps retrying while the server is unreachable, in ms (default 4000). */
  writeRetryMs?: number | undefined;
  /** The same for a read (default 1000: a waiting client gets its 503 quickly). */
  readRetryMs?: number | undefined;
  /** A query that takes longer fails with store_unavailable, in ms (default 15000): nothing hangs. */
  queryTimeoutMs?: number | undefined;
  /** Told of each retried operation (the `sluice_store_retries_total` metric). */
  onRetry?: ((operation: string) => void) | undefined;
}

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
const ignore = (): void => {};

/** A statement with its own read timeout: pg honours `query_timeout` per query (not in @types/pg). */
type TimedQuery = pg.QueryConfig & { query_timeout: number };

/**
 * Whether a failed statement leaves its connection unusable: any failure that is not the
 * server's own answer (an SQLSTATE), such as a timed-out statement whose answer may still come,
 * or a connection that broke. Such a connection is destroyed, never put back in the pool.
 */
function brokenConnection(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return !(typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code));
}

/** The shared store for several gateway replicas. */
export class PostgresStore implements Store, KeyStore {
  readonly kind = 'postgres' as const;
  private readonly pool: pg.Pool;
  private readonly schema: string | undefined;
  private closed = false;
  private readonly retry: RetryWindows;
  private readonly queryTimeoutMs: number;

  constructor(url: string, options: PostgresStoreOptions = {}) {
    const { schema } = options;
    if (schema !== undefined && !SCHEMA_NAME.test(schema)) {
      throw new TypeError(`Invalid PostgreSQL schema name ${JSON.stringify(schema)}: use a-z, 0-9 and _.`);
    }
    this.schema = schema;
    this.retry = {
      readMs: options.readRetryMs ?? 1_000,
      writeMs: options.writeRetryMs ?? 4_000,
      onRetry: options.onRetry,
    };
    this.queryTimeoutMs = options.queryTimeoutMs ?? 15_000;
    this.pool = new pg.Pool({
      connectionString: url,
      connectionTimeoutMillis: options.connectionTimeoutMillis ?? 5000,
      query_timeout: options.queryTimeoutMs ?? 15_000,
      max: options.maxConnections ?? 10,
      ...(schema === undefined ? {} : { options: `-c search_path=${schema}` }),
    });
    // An idle connection that breaks is reported here; unhandled, it would crash the process.
    // The next query on the pool reports the outage as store_unavailable instead.
    this.pool.on('error', ignore);
  }

  async migrate(): Promise<void> {
    await this.transaction('migrate', (client) => migratePostgres(client, this.schema));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.pool.end();
    } catch (err) {
      throw fromPostgresError('close', err);
    }
  }

  async insertResponse(response: StoredResponse): Promise<void> {
    await this.query('insertResponse', SQL.insertResponse, insertValues(response));
  }

  async updateResponse(id: string, update: ResponseUpdate): Promise<boolean> {
    return changed(await this.query('updateResponse', SQL.updateResponse, updateValues(id, update)));
  }

  async finishResponse(ending: ResponseEnding): Promise<boolean> {
    return this.transaction('finishResponse', async (client) => {
      if (ending.insert) await client.query(SQL.insertResponse, insertValues(ending.insert));
      if (
        ending.update &&
        !changed(await client.query(SQL.updateResponse, updateValues(ending.update.id, ending.update)))
      )
        return false;
      const conversation = ending.conversation;
      if (conversation) {
        if (!changed(await client.query(SQL.lockConversation, [conversation.id])))
          throw new ConversationGone(conversation.id);
        if (conversation.items.length > 0)
          await client.query(SQL.appendItems, appendValues(conversation.id, conversation.items));
      }
      return true;
    });
  }

  async renewReplicaLease(replicaId: string, leaseMs: number): Promise<void> {
    await this.query('renewReplicaLease', SQL.renewLease, [replicaId, Math.trunc(leaseMs)]);
  }

  async dropReplicaLease(replicaId: string): Promise<void> {
    await this.query('dropReplicaLease', SQL.dropLease, [replicaId]);
  }

  async forgetLapsedReplicas(olderThanMs: number): Promise<number> {
    return (
      (await this.query('forgetLapsedReplicas', SQL.forgetLapsed, [Math.trunc(olderThanMs)])).rowCount ?? 0
    );
  }

  async listOrphanedResponses(query: OrphanQuery): Promise<OrphanedResponse[]> {
    const values = [query.limit, query.unownedUpdatedBefore, query.id ?? null];
    const { rows } = await this.query<PostgresOrphanRow>('listOrphanedResponses', SQL.listOrphans, values);
    return rows.map((row) => ({
      id: row.id,
      ownerReplicaId: row.owner_replica_id,
      json: row.json,
      eventsJson: row.events_json,
      updatedAt: Number(row.updated_at),
    }));
  }

  async endOrphanedResponse(orphan: OrphanedResponse, update: ResponseUpdate): Promise<boolean> {
    const values = [
      orphan.id,
      orphan.ownerReplicaId,
      orphan.updatedAt,
      Date.now(),
      update.json,
      update.status,
      update.eventsJson ?? null,
    ];
    return changed(await this.query('endOrphanedResponse', SQL.endOrphan, values));
  }

  async getResponse(id: string): Promise<StoredResponse | undefined> {
    const { rows } = await this.query<PostgresResponseRow>('getResponse', SQL.getResponse, [id]);
    return rows[0] && toStoredResponse(rows[0]);
  }

  async deleteResponse(id: string): Promise<boolean> {
    return changed(await this.query('deleteResponse', SQL.deleteResponse, [id]));
  }

  async requestCancel(id: string): Promise<boolean> {
    return changed(await this.query('requestCancel', SQL.requestCancel, [id, Date.now()]));
  }

  async insertConversation(conversation: StoredConversation, items: readonly StoredItem[]): Promise<void> {
    await this.transaction('insertConversation', async (client) => {
      const { id, createdAt, metadataJson, ownerKeyId } = conversation;
      await client.query(SQL.insertConversation, [id, createdAt, metadataJson, ownerKeyId]);
      if (items.length > 0) await client.query(SQL.appendItems, appendValues(id, items));
    });
  }

  async getConversation(id: string): Promise<StoredConversation | undefined> {
    const { rows } = await this.query<PostgresConversationRow>('getConversation', SQL.getConversation, [id]);
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

  async updateConversationMetadata(id: string, metadataJson: string): Promise<boolean> {
    const values = [id, metadataJson];
    return changed(await this.query('updateConversationMetadata', SQL.updateConversationMetadata, values));
  }

  async deleteConversation(id: string): Promise<boolean> {
    return changed(await this.query('deleteConversation', SQL.deleteConversation, [id]));
  }

  async appendConversationItems(id: string, items: readonly StoredItem[]): Promise<boolean> {
    return this.transaction('appendConversationItems', async (client) => {
      const locked = await client.query(SQL.lockConversation, [id]);
      if (!changed(locked)) return false;
      if (items.length > 0) await client.query(SQL.appendItems, appendValues(id, items));
      return true;
    });
  }

  async listConversationItems(id: string, page: PageRequest): Promise<Page<StoredItem> | undefined> {
    const withCursor = page.after !== undefined;
    const values = withCursor ? [id, page.limit + 1, page.after] : [id, page.limit + 1];
    const sql = pageSql(page.order, withCursor);
    const { rows } = await this.query<PostgresItemRow>('listConversationItems', sql, values);
    if (rows.length === 0 && !(await this.conversationExists('listConversationItems', id))) return undefined;
    return toPage(rows.map(toStoredItem), page.limit);
  }

  async allConversationItems(id: string): Promise<StoredItem[] | undefined> {
    const { rows } = await this.query<PostgresItemRow>('allConversationItems', SQL.allItems, [id]);
    if (rows.length === 0 && !(await this.conversationExists('allConversationItems', id))) return undefined;
    return rows.map(toStoredItem);
  }

  async getConversationItem(conversationId: string, itemId: string): Promise<StoredItem | undefined> {
    const values = [conversationId, itemId];
    const { rows } = await this.query<PostgresItemRow>('getConversationItem', SQL.getItem, values);
    return rows[0] && toStoredItem(rows[0]);
  }

  async deleteConversationItem(conversationId: string, itemId: string): Promise<boolean> {
    return changed(await this.query('deleteConversationItem', SQL.deleteItem, [conversationId, itemId]));
  }

  async insertKey(key: StoredApiKey): Promise<void> {
    await this.query('insertKey', SQL.insertKey, [
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

  async getKeyByHash(hash: string): Promise<StoredApiKey | undefined> {
    const { rows } = await this.query<PostgresKeyRow>('getKeyByHash', SQL.getKeyByHash, [hash]);
    return rows[0] && toStoredApiKey(rows[0]);
  }

  async getKey(id: string): Promise<StoredApiKey | undefined> {
    const { rows } = await this.query<PostgresKeyRow>('getKey', SQL.getKey, [id]);
    return rows[0] && toStoredApiKey(rows[0]);
  }

  async listKeys(): Promise<StoredApiKey[]> {
    const { rows } = await this.query<PostgresKeyRow>('listKeys', SQL.listKeys, []);
    return rows.map(toStoredApiKey);
  }

  async deleteKey(id: string): Promise<boolean> {
    return changed(await this.query('deleteKey', SQL.deleteKey, [id]));
  }

  async addUsage(
    id: string,
    requests: number,
    promptTokens: number,
    completionTokens: number,
  ): Promise<boolean> {
    const values = [id, requests, promptTokens, completionTokens];
    return changed(await this.query('addUsage', SQL.addUsage, values));
  }

  async getUsage(id: string): Promise<StoredKeyUsage | undefined> {
    const { rows } = await this.query<PostgresUsageRow>('getUsage', SQL.getUsage, [id]);
    const row = rows[0];
    return (
      row && {
        requests: Number(row.requests),
        promptTokens: Number(row.prompt_tokens),
        completionTokens: Number(row.completion_tokens),
      }
    );
  }

  private async conversationExists(operation: string, id: string): Promise<boolean> {
    return changed(await this.query(operation, SQL.conversationExists, [id]));
  }

  /** One statement, retried while the server is unreachable (see postgres-retry.ts). */
  private query<R extends pg.QueryResultRow>(
    operation: string,
    sql: string,
    values: unknown[],
  ): Promise<pg.QueryResult<R>> {
    const attempt = async (until: number) => {
      const client = await this.checkout(operation, until);
      try {
        const config: TimedQuery = { text: sql, values, query_timeout: this.timeoutUntil(until) };
        const result = await client.query<R>(config);
        client.off('error', ignore);
        client.release();
        return result;
      } catch (err) {
        client.off('error', ignore);
        client.release(brokenConnection(err));
        throw fromPostgresError(operation, err);
      }
    };
    const inserted = () => ({ rowCount: 1, rows: [] }) as unknown as pg.QueryResult<R>;
    return withRetry(operation, this.retry, attempt, inserted);
  }

  /** A transaction, retried as a whole while the server is unreachable. */
  private transaction<T>(operation: string, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return withRetry(
      operation,
      this.retry,
      (until) => this.transactionOnce(operation, work, until),
      () => true as T,
    );
  }

  /**
   * The bound of one statement: the query timeout, cut to what is left of the retry window (at
   * least a second, so that a slow but answering server is not taken for a lost one). A statement
   * past it fails `Query read timeout` (store_unavailable) and its connection is destroyed.
   */
  private timeoutUntil(until: number): number {
    return Math.max(1_000, Math.min(this.queryTimeoutMs, until - Date.now()));
  }

  /**
   * A connection of the pool, waited for until the window ends at the latest (pg-pool's own
   * connect timeout is one number for every caller). A checkout given up on goes back to the
   * pool when it completes. The client's 'error' events are ignored while it is checked out:
   * a connection lost between two statements would otherwise be unhandled; the failing
   * statement reports it.
   */
  private async checkout(operation: string, until: number): Promise<pg.PoolClient> {
    const pending = this.pool.connect();
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error('timeout exceeded when trying to connect')),
        Math.max(1_000, until - Date.now()),
      );
    });
    try {
      const client = await Promise.race([pending, expired]);
      client.on('error', ignore);
      return client;
    } catch (err) {
      pending.then((client) => client.release(), ignore);
      throw fromPostgresError(operation, err);
    } finally {
      clearTimeout(timer);
    }
  }

  private async transactionOnce<T>(
    operation: string,
    work: (client: pg.PoolClient) => Promise<T>,
    until: number,
  ): Promise<T> {
    const client = await this.checkout(operation, until);
    // Every statement of the transaction is bounded by the window (see timeoutUntil).
    const query = client.query.bind(client) as (config: TimedQuery) => Promise<pg.QueryResult>;
    const bounded = new Proxy(client, {
      get: (target, key, receiver) =>
        key === 'query'
          ? (text: string | pg.QueryConfig, values?: unknown[]) =>
              query({
                ...(typeof text === 'string' ? { text, values } : text),
                query_timeout: this.timeoutUntil(until),
              })
          : Reflect.get(target, key, receiver),
    });
    try {
      await bounded.query('BEGIN');
      const result = await work(bounded);
      await bounded.query('COMMIT');
      client.off('error', ignore);
      client.release();
      return result;
    } catch (err) {
      const rolledBack =
        !brokenConnection(err) &&
        (await bounded.query('ROLLBACK').then(
          () => true,
          () => false,
        ));
      client.off('error', ignore);
      // A client whose rollback failed (or was not tried) is in an unknown state: destroy it.
      client.release(!rolledBack);
      throw fromPostgresError(operation, err);
    }
  }
}

function changed(result: pg.QueryResult): boolean {
  return (result.rowCount ?? 0) > 0;
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

function appendValues(id: string, items: readonly StoredItem[]): unknown[] {
  return [id, items.map((item) => item.id), items.map((item) => item.json)];
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

function toStoredItem(row: PostgresItemRow): StoredItem {
  return { id: row.item_id, json: row.json };
}
