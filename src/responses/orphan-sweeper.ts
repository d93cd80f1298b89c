import { GatewayRestarted } from '../errors/http-errors.js';
import type { Logger } from '../observability/logger.js';
import type { LeaseView } from '../storage/replica-lease.js';
import type { OrphanedResponse, ResponseUpdate, Store } from '../storage/types.js';
import { ResponseBuilder } from './response-builder.js';
import type { ResponseObject } from './types.js';

/** Orphans ended per pass; the next pass takes the rest. */
const BATCH = 100;
/** A response stored before replica leases existed (no owner) is an orphan once silent this long. */
const UNOWNED_STALE_MS = 10 * 60_000;
/** Leases lapsed this long ago are deleted (a replica that is gone counts as dead all the same). */
const FORGET_LAPSED_AFTER_MS = 60 * 60_000;

/**
 * Ends the background responses of gateway processes that stopped: every unfinished response
 * whose owner replica's lease lapsed becomes `failed` with `gateway_restarted`. Its stored
 * object closes the items left open as `incomplete` (as the builder does for `response.failed`),
 * and its stored events end with exactly one `response.failed` with the next sequence number.
 * Each end is one conditional UPDATE, so replicas sweeping at once never both end a response.
 *
 * The stored lease time alone does not decide: a response of this process's own lease is never
 * ended here (this process runs it, or its finisher still writes its end), even when that lease
 * lapsed in the store during an outage; and no response is ended while this process's lease
 * says it cannot judge others (it was itself cut off from the store less than a lease ago).
 */
export class OrphanSweeper {
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<number> | undefined;

  constructor(
    private readonly store: Store,
    private readonly intervalMs: number,
    private readonly log: Logger,
    /** This process's lease: its own responses, and whether it may judge others' now. */
    private readonly lease: LeaseView,
  ) {}

  /** A pass now, then one every interval. */
  start(): void {
    this.timer = setInterval(() => void this.sweep(), this.intervalMs);
    this.timer.unref();
    void this.sweep();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.sweeping;
  }

  /** One pass (joins the one running); resolves how many responses it ended. Never rejects. */
  sweep(): Promise<number> {
    this.sweeping ??= this.pass().finally(() => {
      this.sweeping = undefined;
    });
    return this.sweeping;
  }

  /** Ends one response now if it is an orphan; resolves its stored JSON when it did. */
  async recover(id: string): Promise<string | undefined> {
    if (!this.lease.mayJudgeOthers()) return undefined;
    try {
      const [orphan] = await this.store.listOrphanedResponses(this.query(1, id));
      return orphan && (await this.end(orphan));
    } catch (err) {
      this.log.warn({ responseId: id, err }, 'could not check whether a response is orphaned');
      return undefined;
    }
  }

  private async pass(): Promise<number> {
    if (!this.lease.mayJudgeOthers()) return 0;
    try {
      await this.store.forgetLapsedReplicas(FORGET_LAPSED_AFTER_MS);
      let ended = 0;
      for (const orphan of await this.store.listOrphanedResponses(this.query(BATCH))) {
        if ((await this.end(orphan)) !== undefined) ended++;
      }
      return ended;
    } catch (err) {
      this.log.warn({ err }, 'could not sweep orphaned background responses');
      return 0;
    }
  }

  private query(limit: number, id?: string) {
    return { limit, unownedUpdatedBefore: Date.now() - UNOWNED_STALE_MS, id };
  }

  private async end(orphan: OrphanedResponse): Promise<string | undefined> {
    if (orphan.ownerReplicaId === this.lease.id) return undefined;
    let update: ResponseUpdate;
    try {
      update = failedOrphan(orphan);
    } catch (err) {
      this.log.error({ responseId: orphan.id, err }, 'an orphaned response could not be read');
      return undefined;
    }
    if (!(await this.store.endOrphanedResponse(orphan, update))) return undefined;
    this.log.warn(
      { responseId: orphan.id, replica: orphan.ownerReplicaId },
      'ended a background response whose gateway process stopped',
    );
    return update.json;
  }
}

/** The stored form of an orphan ended as failed: its object, and its events with the terminal one appended. */
export function failedOrphan(orphan: OrphanedResponse): ResponseUpdate {
  const response = JSON.parse(orphan.json) as ResponseObject;
  const eventsText = orphan.eventsJson?.trim() ?? '[]';
  const events = JSON.parse(eventsText) as { sequence_number?: unknown }[];
  const last = events.at(-1)?.sequence_number;
  const builder = ResponseBuilder.resume(response, typeof last === 'number' ? last + 1 : events.length);
  const error = new GatewayRestarted();
  const terminal = builder.terminal({ kind: 'failed', code: error.code, message: error.message });
  const appended = [...terminal.closing.map((event) => event.json), terminal.eventJson].join(',');
  const eventsJson =
    events.length === 0
      ? `[${appended}]`
      : `${eventsText.slice(0, eventsText.lastIndexOf(']'))},${appended}]`;
  return { json: terminal.responseJson, status: terminal.status, eventsJson };
}
