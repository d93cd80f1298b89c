import pg from 'pg';
import { fromPostgresError } from './error-mapping.js';
import { type RetryWindows, withRetry } from './postgres-retry.js';

export interface PostgresConnectionOptions {
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

/** Whether a statement touched a row. */
export function changed(result: pg.QueryResult): boolean {
  return (result.rowCount ?? 0) > 0;
}

/**
 * The pool of the PostgreSQL store and how it is used: a statement or a transaction, under an
 * operation's name (its retry policy, see postgres-retry.ts), on a connection checked out within
 * the retry window, each statement bounded by what is left of it. Errors come out as StoreErrors.
 */
export class PostgresConnection {
  readonly schema: string | undefined;
  private readonly pool: pg.Pool;
  private closed = false;
  private readonly retry: RetryWindows;
  private readonly queryTimeoutMs: number;

  constructor(url: string, options: PostgresConnectionOptions = {}) {
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

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.pool.end();
    } catch (err) {
      throw fromPostgresError('close', err);
    }
  }

  /** One statement, retried while the server is unreachable (see postgres-retry.ts). */
  query<R extends pg.QueryResultRow>(
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
  transaction<T>(operation: string, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
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
    return Math.max(1_000, Math.min(this.queryTimeoutMs, until - performance.now()));
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
        Math.max(1_000, until - performance.now()),
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
