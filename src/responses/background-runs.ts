import type { ResumableStream } from '../dispatch/resumable-stream.js';
import { isSluiceError, type SluiceError } from '../errors/base.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { Logger } from '../observability/logger.js';
import type { Store } from '../storage/types.js';
import { joinEvents, record } from './durable-finish.js';
import type { ResponseRun, RunEnd } from './response-run.js';
import type { ResponseRunner } from './response-runner.js';
import { isUnfinished, type Terminal } from './terminal.js';
import type { PreparedResponse } from './translate.js';

/** How often a background run writes its progress (and reads a cancel request). */
export const PROGRESS_INTERVAL_MS = 250;

/**
 * Background responses (`background: true`): stored at once as `queued`, then generated detached
 * from the client, writing their progress (so that any replica can follow them) and honouring a
 * cancel requested on any replica. Those of this process live here, keyed by response id, so that
 * cancel and live replay can find them.
 */
export class BackgroundRuns {
  private readonly runs = new Map<string, { run: ResponseRun; done: Promise<Terminal> }>();

  constructor(
    private readonly runner: ResponseRunner,
    private readonly store: Store,
    private readonly log: Logger,
    /** This process's replica lease: its background responses are stored as owned by it. */
    private readonly replicaId: string | undefined,
    /** Told how each run ended (counted as the foreground ones are). */
    private readonly onEnded: (model: string, end: RunEnd) => void,
  ) {}

  /**
   * Starts a background response: stored at once as `queued`, then generated detached from the
   * client. Returns its run (for a streaming client to watch) and the stored JSON.
   */
  async start(prepared: PreparedResponse): Promise<{ run: ResponseRun; queuedJson: string }> {
    prepared.response.status = 'queued';
    const run = this.runner.newRun(prepared);
    // created and queued are stored with it: a replay (from any replica) starts from them.
    run.builder.begin(true);
    const queuedJson = JSON.stringify(prepared.response);
    await this.store.insertResponse({
      ...record(prepared, queuedJson, 'queued', await joinEvents(run.events)),
      ownerReplicaId: this.replicaId ?? null,
    });
    // Detached from the client: its own abort signal, never the client's.
    const controller = new AbortController();
    prepared.dispatch = { ...prepared.dispatch, signal: controller.signal };
    const done = this.run(prepared, run, controller);
    this.runs.set(prepared.response.id, { run, done });
    void done.finally(() => this.runs.delete(prepared.response.id));
    return { run, queuedJson };
  }

  private async run(
    prepared: PreparedResponse,
    run: ResponseRun,
    controller: AbortController,
  ): Promise<Terminal> {
    const id = prepared.response.id;
    let end: RunEnd;
    let ticker: NodeJS.Timeout | undefined;
    // One progress write at a time, and none once the final write starts.
    const progress = { inFlight: undefined as Promise<void> | undefined, written: -1, closed: false };
    try {
      const opening = this.runner.open(prepared);
      const cancelWhileQueued = setInterval(() => {
        void this.store.getResponse(id).then((r) => {
          if (r?.cancelRequested) controller.abort(new ClientDisconnected());
        });
      }, PROGRESS_INTERVAL_MS);
      let stream: ResumableStream;
      try {
        stream = await opening;
      } finally {
        clearInterval(cancelWhileQueued);
      }
      run.builder.started();
      ticker = setInterval(() => {
        if (progress.inFlight) return;
        progress.inFlight = this.progress(id, run, progress).finally(() => {
          progress.inFlight = undefined;
        });
      }, PROGRESS_INTERVAL_MS);
      end = await this.runner.follow(prepared, run, stream);
      this.runner.noteResumes(run, stream, prepared);
    } catch (err) {
      end = controller.signal.aborted
        ? { kind: 'cancelled' }
        : { kind: 'failed', code: codeOf(err), message: (err as Error).message };
    } finally {
      if (ticker) clearInterval(ticker);
    }
    // The final write does not wait for a progress write in flight (its wait would add to the
    // finish's one budget): the SQL refuses a progress write that lands after the final one, and
    // one not yet sent is not sent.
    progress.closed = true;
    this.onEnded(prepared.response.model, end);
    return this.runner.finish(prepared, run, end, 'update');
  }

  /**
   * Writes a background run's progress (the response so far and every event emitted so far, so
   * that another replica can follow its stream) and honours a cancel request made on any replica.
   */
  private async progress(
    id: string,
    run: ResponseRun,
    state: { written: number; closed: boolean },
  ): Promise<void> {
    try {
      const stored = await this.store.getResponse(id);
      // The run ended meanwhile: its final write (which may have landed already) says the rest.
      if (state.closed) return;
      if (stored?.cancelRequested) {
        run.cancel();
        return;
      }
      if (!stored || !isUnfinished(stored.status)) {
        // Deleted, or ended by another replica that took this one for dead: stop generating.
        this.log.warn({ responseId: id, status: stored?.status }, 'background response ended elsewhere');
        run.cancel();
        return;
      }
      const count = run.events.length;
      if (count === state.written) return;
      // The JSON and the events are taken at one instant, so they agree. Only the new events are
      // sent, unless what is stored is uncertain (the first write, or after a write that failed).
      const json = JSON.stringify(run.response);
      const status = run.response.status;
      // A whole rewrite is joined a slice a turn (joinEvents), from the events of that instant.
      const update =
        state.written < 0
          ? { json, status, eventsJson: await joinEvents(run.events.slice(0, count)) }
          : { json, status, appendEventsJson: run.events.slice(state.written).join(',') };
      state.written = -1;
      if (await this.store.updateResponse(id, update)) state.written = count;
      else if (!state.closed) run.cancel();
    } catch (err) {
      this.log.warn({ responseId: id, err }, 'could not write background progress');
    }
  }

  /** Waits (at most `ms`) for the background runs of this process to store their end. */
  async settle(ms: number): Promise<void> {
    await settle(Promise.allSettled([...this.runs.values()].map((b) => b.done)), ms);
  }

  /** The live run of a background response in this process, if any. */
  liveRun(id: string): ResponseRun | undefined {
    return this.runs.get(id)?.run;
  }

  /** The local run of `id` cancelled, and its stored end; undefined when it does not run here. */
  cancel(id: string): Promise<Terminal> | undefined {
    const local = this.runs.get(id);
    if (!local) return undefined;
    local.run.cancel();
    return local.done;
  }
}

/** Waits for a promise, at most `ms`; never rejects. */
async function settle(promise: Promise<unknown> | undefined, ms: number): Promise<void> {
  if (!promise) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    promise.catch(() => {}),
    new Promise((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
  ]);
  clearTimeout(timer);
}

function codeOf(err: unknown): string {
  return isSluiceError(err) ? (err as SluiceError).code : 'internal_error';
}
