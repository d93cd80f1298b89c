/**
 * The storage of the Responses and Conversations APIs, behind one interface with two real
 * backends: SQLite (better-sqlite3, the embedded default) and PostgreSQL (pg, for several
 * gateway replicas). Objects are kept as the exact JSON text the client was sent, never
 * re-serialised: what `GET` returns is byte-identical to what was emitted. The same backends
 * also keep the virtual API keys and their usage counters (`KeyStore`).
 */

export interface StoredResponse {
  id: string;
  /** The response object, as JSON text: the terminal event's `response`, or the latest snapshot while running. */
  json: string;
  /** `queued`, `in_progress`, `completed`, `incomplete`, `failed`, `cancelled`. */
  status: string;
  model: string;
  /** Unix seconds. */
  createdAt: number;
  previousResponseId: string | null;
  conversationId: string | null;
  /** The input items of this request (each with an `id`), as JSON text of an array. */
  inputItemsJson: string;
  /** Every streamed event, in order, as JSON text of an array of event objects; null when not kept. */
  eventsJson: string | null;
  /** Set by a cancel request; a background run polls it (possibly from another replica). */
  cancelRequested: boolean;
  /** The API key that created it; null when made while the gateway ran open (then read only while it runs open: ownership.ts). */
  ownerKeyId: string | null;
  /** The gateway replica running it (background responses); null once read back when none. */
  ownerReplicaId?: string | null | undefined;
}

export interface StoredConversation {
  id: string;
  /** Unix seconds. */
  createdAt: number;
  /** JSON text of the metadata object. */
  metadataJson: string;
  /** The API key that created it; null when made while the gateway ran open (then read only while it runs open: ownership.ts). */
  ownerKeyId: string | null;
}

export interface StoredItem {
  id: string;
  /** JSON text of the item. */
  json: string;
}

export interface PageRequest {
  /** Return items after the one with this id (exclusive), in the requested order. */
  after?: string | undefined;
  /** 1..100. */
  limit: number;
  order: 'asc' | 'desc';
}

export interface Page<T> {
  data: T[];
  hasMore: boolean;
}

export interface ResponseUpdate {
  json: string;
  status: string;
  /** Replaces the stored events (JSON text of an array). */
  eventsJson?: string | null | undefined;
  /**
   * Appends to the stored events instead (when `eventsJson` is not given): the JSON texts of the
   * new events joined by commas, without brackets. A progress write sends only what is new.
   */
  appendEventsJson?: string | undefined;
}

/** How a response ends in storage: one transaction (`Store.finishResponse`). */
export interface ResponseEnding {
  /** A foreground response: inserted whole. */
  insert?: StoredResponse | undefined;
  /** A background response: its stored row ends, only while it is still unfinished. */
  update?: (ResponseUpdate & { id: string }) | undefined;
  /** Items appended to a conversation; the conversation must still exist, or nothing is written. */
  conversation?: { id: string; items: readonly StoredItem[] } | undefined;
}

/** An unfinished response whose replica's lease lapsed (or that has none), as last written. */
export interface OrphanedResponse {
  id: string;
  ownerReplicaId: string | null;
  json: string;
  eventsJson: string | null;
  /** The `updated_at` it was read with; ending it is conditional on it (optimistic concurrency). */
  updatedAt: number;
}

export interface OrphanQuery {
  limit: number;
  /** Unix ms: responses with no owner replica (stored before leases existed) count when not updated since. */
  unownedUpdatedBefore: number;
  /** Only this response. */
  id?: string | undefined;
}

export interface Store {
  /** Which backend this is, for logs. */
  readonly kind: 'sqlite' | 'postgres';
  /** Creates or upgrades the schema (idempotent; safe when several replicas start at once). */
  migrate(): Promise<void>;
  close(): Promise<void>;

  /** Inserts a response. Throws StoreError on a duplicate id. */
  insertResponse(response: StoredResponse): Promise<void>;
  /**
   * Replaces the JSON, status (and events when given) of an unfinished response. The status never
   * moves backwards, enforced in the SQL: a response that has ended (completed, incomplete, failed,
   * cancelled) is never written again, and `in_progress` never goes back to `queued`. False when
   * the response does not exist or the write was refused for that reason.
   */
  updateResponse(id: string, update: ResponseUpdate): Promise<boolean>;
  /**
   * Stores a response's end and its conversation append in one transaction. Throws (nothing
   * written) when a write fails or the conversation no longer exists (ConversationGone). False
   * when an `update` was refused because the response had already ended.
   */
  finishResponse(ending: ResponseEnding): Promise<boolean>;
  getResponse(id: string): Promise<StoredResponse | undefined>;
  /** Deletes a response; false when it did not exist. */
  deleteResponse(id: string): Promise<boolean>;
  /** Marks a response's cancellation as requested; false when it does not exist. */
  requestCancel(id: string): Promise<boolean>;

  /** Registers or renews a gateway replica's lease: it expires `leaseMs` from now (the store's clock). */
  renewReplicaLease(replicaId: string, leaseMs: number): Promise<void>;
  /** Drops a replica's lease (it stops): its unfinished responses are orphans at once. */
  dropReplicaLease(replicaId: string): Promise<void>;
  /** Forgets leases that lapsed more than `olderThanMs` ago (an owner that is gone is as dead as a lapsed one). */
  forgetLapsedReplicas(olderThanMs: number): Promise<number>;
  /** Unfinished responses whose owner replica's lease lapsed or is gone, oldest first. */
  listOrphanedResponses(query: OrphanQuery): Promise<OrphanedResponse[]>;
  /**
   * Ends an orphan, race-free between replicas: only while it is still unfinished, still owned by
   * `orphan.ownerReplicaId`, that owner's lease still lapsed, and unchanged since it was read.
   * False when another replica (or a late owner) got there first.
   */
  endOrphanedResponse(orphan: OrphanedResponse, update: ResponseUpdate): Promise<boolean>;

  insertConversation(conversation: StoredConversation, items: readonly StoredItem[]): Promise<void>;
  getConversation(id: string): Promise<StoredConversation | undefined>;
  updateConversationMetadata(id: string, metadataJson: string): Promise<boolean>;
  /** Deletes a conversation and its items; false when it did not exist. */
  deleteConversation(id: string): Promise<boolean>;
  /** Appends items at the end of a conversation, in order; false when the conversation does not exist. */
  appendConversationItems(id: string, items: readonly StoredItem[]): Promise<boolean>;
  /** A page of a conversation's items; undefined when the conversation does not exist. */
  listConversationItems(id: string, page: PageRequest): Promise<Page<StoredItem> | undefined>;
  /** Every item of a conversation in order (to rebuild its context); undefined when it does not exist. */
  allConversationItems(id: string): Promise<StoredItem[] | undefined>;
  getConversationItem(conversationId: string, itemId: string): Promise<StoredItem | undefined>;
  deleteConversationItem(conversationId: string, itemId: string): Promise<boolean>;
}

/** A virtual API key as stored. The secret itself is never stored, only its SHA-256 digest. */
export interface StoredApiKey {
  /** `key_…`. */
  id: string;
  name: string | null;
  /** Lowercase hex SHA-256 of the secret; unique. */
  hash: string;
  /** The first characters of the secret, for display. */
  prefix: string;
  /** The models this key may use; null means every model. */
  models: string[] | null;
  /** Requests per minute; null means unlimited. */
  rpm: number | null;
  /** Tokens (prompt + completion) per minute; null means unlimited. */
  tpm: number | null;
  /** Lifetime total tokens; null means unlimited. */
  budgetTokens: number | null;
  /** Unix seconds. */
  createdAt: number;
}

/** Lifetime counters of one key. */
export interface StoredKeyUsage {
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

export interface KeyStore {
  /** Inserts a key with zeroed usage counters. Throws StoreError (store_duplicate) on a duplicate id or hash. */
  insertKey(key: StoredApiKey): Promise<void>;
  getKeyByHash(hash: string): Promise<StoredApiKey | undefined>;
  getKey(id: string): Promise<StoredApiKey | undefined>;
  /** Every key, oldest first. */
  listKeys(): Promise<StoredApiKey[]>;
  /** Deletes a key and its usage; false when it did not exist. */
  deleteKey(id: string): Promise<boolean>;
  /**
   * Adds to a key's counters in one atomic increment, so concurrent requests (from any number of
   * replicas) never lose an update. False when the key does not exist (deleted meanwhile).
   */
  addUsage(id: string, requests: number, promptTokens: number, completionTokens: number): Promise<boolean>;
  /** Undefined when the key does not exist. */
  getUsage(id: string): Promise<StoredKeyUsage | undefined>;
}

/** The `models_json` column of both backends: JSON text of the allowlist, or NULL for every model. */
export function modelsToJson(models: readonly string[] | null): string | null {
  return models === null ? null : JSON.stringify(models);
}

export function modelsFromJson(json: string | null): string[] | null {
  if (json === null) return null;
  const parsed: unknown = JSON.parse(json);
  if (!Array.isArray(parsed) || !parsed.every((model) => typeof model === 'string')) {
    throw new TypeError('api_keys.models_json is not a JSON array of strings');
  }
  return parsed;
}
