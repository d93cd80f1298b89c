import { ResponseNotFound } from '../errors/not-found-errors.js';
import { InvalidValue } from '../errors/request-errors.js';
import type { Store, StoredResponse } from '../storage/types.js';
import { type BackgroundRuns, PROGRESS_INTERVAL_MS } from './background-runs.js';
import type { OrphanSweeper } from './orphan-sweeper.js';
import { type Caller, visibleTo } from './ownership.js';
import { isUnfinished } from './terminal.js';
import type { ResponseObject } from './types.js';

/**
 * Stored responses as their owner sees them: read, delete, and cancel a background one (here,
 * on the replica running it, or ended at once when that replica is gone).
 */
export class StoredResponses {
  constructor(
    private readonly store: Store | undefined,
    private readonly background: BackgroundRuns | undefined,
    private readonly orphans: OrphanSweeper | undefined,
  ) {}

  /** A stored response the caller may see (404 otherwise). */
  async retrieve(id: string, caller: Caller): Promise<StoredResponse> {
    const stored = this.store ? await this.store.getResponse(id) : undefined;
    if (!stored || !visibleTo(stored.ownerKeyId, caller)) throw new ResponseNotFound(id);
    return stored;
  }

  async delete(id: string, caller: Caller): Promise<void> {
    await this.retrieve(id, caller);
    this.background?.liveRun(id)?.cancel();
    const deleted = this.store ? await this.store.deleteResponse(id) : false;
    if (!deleted) throw new ResponseNotFound(id);
  }

  /** Cancels a background response; returns its object once the cancellation is stored. */
  async cancel(id: string, caller: Caller): Promise<string> {
    const stored = await this.retrieve(id, caller);
    const object = JSON.parse(stored.json) as ResponseObject;
    if (!object.background) {
      throw new InvalidValue('Only background responses can be cancelled.', 'response_id');
    }
    if (!isUnfinished(stored.status)) return stored.json;
    await this.store!.requestCancel(id);
    const local = this.background?.cancel(id);
    if (local) return (await local).json;
    // The replica running it is gone: end it now instead of waiting for a reader that will not come.
    const recovered = await this.orphans?.recover(id);
    if (recovered !== undefined) return recovered;
    // Running on another replica: it reads the request within its progress interval.
    const until = Date.now() + 10 * PROGRESS_INTERVAL_MS + 2_000;
    while (Date.now() < until) {
      const now = await this.retrieve(id, caller);
      if (!isUnfinished(now.status)) return now.json;
      await new Promise((resolve) => setTimeout(resolve, PROGRESS_INTERVAL_MS / 2));
    }
    return (await this.retrieve(id, caller)).json;
  }
}
