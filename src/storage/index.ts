import { PostgresStore } from './postgres-store.js';
import { SqliteStore } from './sqlite-thread-store.js';
import type { KeyStore, Store } from './types.js';

export type StoreOptions =
  | { kind: 'sqlite'; path: string; busyTimeoutMs?: number | undefined }
  | {
      kind: 'postgres';
      url: string;
      schema?: string;
      writeRetryMs?: number | undefined;
      onRetry?: ((operation: string) => void) | undefined;
    };

/** Opens the configured backend; call `migrate()` before using it. Both backends also keep API keys. */
export function createStore(options: StoreOptions): Store & KeyStore {
  switch (options.kind) {
    case 'sqlite':
      return new SqliteStore(options.path, { busyTimeoutMs: options.busyTimeoutMs });
    case 'postgres':
      return new PostgresStore(options.url, {
        schema: options.schema,
        writeRetryMs: options.writeRetryMs,
        onRetry: options.onRetry,
      });
  }
}

export type { StoreErrorCode } from './error-mapping.js';
export { POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS } from './migrations.js';
export { PostgresStore, type PostgresStoreOptions } from './postgres-store.js';
export { type SqliteStoreOptions, SqliteSyncStore } from './sqlite-store.js';
export { type AsyncMethods, SqliteStore } from './sqlite-thread-store.js';
export type * from './types.js';
