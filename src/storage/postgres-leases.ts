import { changed, type PostgresConnection } from './postgres-connection.js';
import { type PostgresOrphanRow, SQL } from './postgres-sql.js';
import type { OrphanedResponse, OrphanQuery, ResponseUpdate } from './types.js';

/**
 * The PostgreSQL store's replica leases, and the orphans they leave: background responses
 * whose replica's lease lapsed (see replica-lease.ts), found and ended by a live replica.
 */

export async function renewReplicaLease(
  db: PostgresConnection,
  replicaId: string,
  leaseMs: number,
): Promise<void> {
  await db.query('renewReplicaLease', SQL.renewLease, [replicaId, Math.trunc(leaseMs)]);
}

export async function dropReplicaLease(db: PostgresConnection, replicaId: string): Promise<void> {
  await db.query('dropReplicaLease', SQL.dropLease, [replicaId]);
}

export async function forgetLapsedReplicas(db: PostgresConnection, olderThanMs: number): Promise<number> {
  return (await db.query('forgetLapsedReplicas', SQL.forgetLapsed, [Math.trunc(olderThanMs)])).rowCount ?? 0;
}

export async function listOrphanedResponses(
  db: PostgresConnection,
  query: OrphanQuery,
): Promise<OrphanedResponse[]> {
  const values = [query.limit, query.unownedUpdatedBefore, query.id ?? null];
  const { rows } = await db.query<PostgresOrphanRow>('listOrphanedResponses', SQL.listOrphans, values);
  return rows.map((row) => ({
    id: row.id,
    ownerReplicaId: row.owner_replica_id,
    json: row.json,
    eventsJson: row.events_json,
    updatedAt: Number(row.updated_at),
  }));
}

export async function endOrphanedResponse(
  db: PostgresConnection,
  orphan: OrphanedResponse,
  update: ResponseUpdate,
): Promise<boolean> {
  const values = [
    orphan.id,
    orphan.ownerReplicaId,
    orphan.updatedAt,
    Date.now(),
    update.json,
    update.status,
    update.eventsJson ?? null,
  ];
  return changed(await db.query('endOrphanedResponse', SQL.endOrphan, values));
}
