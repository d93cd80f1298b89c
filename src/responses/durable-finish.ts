import { isSluiceError } from '../errors/base.js';
import { StoreUnavailable } from '../errors/storage-errors.js';
import { nextTurn } from '../memory/turns.js';
import type { Logger } from '../observability/logger.js';
import type { ResponseEnding, Store, StoredResponse } from '../storage/types.js';
import type { TerminalDraft } from './response-builder.js';
import type { ResponseRun, RunEnd } from './response-run.js';
import { isUnfinished, type Terminal } from './terminal.js';
import type { PreparedResponse } from './translate.js';
import type { ResponseStatus } from './types.js';

/** How long a background response's failed terminal is retried after its write failed. */
const STORE_LATER_WINDOW_MS = 5 * 60_000;

/**
 * The one terminal write of every response (streamed, whole, background, over HTTP or a
 * WebSocket): builds the terminal event, stores the final object (and the conversation's new
 * items, in the same transaction), then emits the closing events and the terminal one, so that
 * what a client is shown last is what is stored. A write that fails is never silent: the
 * terminal becomes a `store_write_failed` failure, stored in its place, and a background
 * response's failure is written again once storage is back. The whole finish waits on the store
 * for at most one write's budget (SQLite's busy timeout, PostgreSQL's write retries): after a
 * write refused as `store_unavailable`, the failure is not written before the client is told.
 */
export class DurableFinisher {
  /** Deferred writes of failed background terminals (see storeLater). */
  private readonly pendingWrites = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(
    private readonly store: Store | undefined,
    private readonly log: Logger,
    /** Told of each final write that failed (the `sluice_store_write_failures_total` metric). */
    private readonly onWriteFailed: (backend: string, code: string) => void,
  ) {}

  /**
   * Builds the terminal event and stores the final object (and the conversation append, in the
   * same transaction), then emits the closing events and the terminal one. When storing fails,
   * the draft is replaced by a `store_write_failed` failure, which is stored instead: what the
   * client sees last is what GET returns, with no gap in the sequence numbers.
   */
  async finish(
    prepared: PreparedResponse,
    run: ResponseRun,
    end: RunEnd,
    write: 'insert' | 'update',
  ): Promise<Terminal> {
    await turnForTerminal(run.builder.contentChars);
    let terminal = run.builder.terminal(end);
    if (prepared.store && this.store) {
      try {
        const stored = await this.store.finishResponse(await this.ending(prepared, run, terminal, write));
        if (!stored) terminal = await this.adoptStored(prepared.response.id, run, terminal);
      } catch (err) {
        this.log.error({ responseId: prepared.response.id, err }, 'storing the response failed');
        this.onWriteFailed(this.store.kind, storeErrorCode(err));
        // Never silent: the client learns in the terminal event that nothing was stored.
        terminal = run.builder.terminal({
          kind: 'failed',
          code: 'store_write_failed',
          message: `The response could not be stored: ${(err as Error).message}`,
        });
        const failure = await this.ending(prepared, run, terminal, write);
        try {
          // One budget for the finish: a store that was unreachable or locked for the whole of
          // one write is not waited on again before the client is told (see storeLater).
          if (err instanceof StoreUnavailable) throw err;
          await this.store.finishResponse(failure);
        } catch (again) {
          if (again !== err)
            this.log.error(
              { responseId: prepared.response.id, err: again },
              'storing the failed response failed too',
            );
          // A background response is stored as queued/in_progress already: it must not stay so.
          // A foreground one stays unstored, as its terminal says.
          if (write === 'update') this.storeLater(prepared.response.id, failure);
        }
      }
    }
    // A long answer's closing events each carry its whole text: each is written in a turn of its own.
    for (const event of terminal.closing) {
      await turnForTerminal(run.builder.contentChars);
      run.publish(event.json, event.type);
    }
    await turnForTerminal(run.builder.contentChars);
    run.publish(terminal.eventJson, terminal.type);
    const usage = run.response.usage;
    prepared.onUsage?.(
      usage ? { prompt_tokens: usage.input_tokens, completion_tokens: usage.output_tokens } : undefined,
    );
    return {
      json: terminal.responseJson,
      eventJson: terminal.eventJson,
      type: terminal.type,
      status: terminal.status,
      end,
    };
  }

  /** The writes that end a response: its final object and events, and its conversation's new items. */
  private async ending(
    prepared: PreparedResponse,
    run: ResponseRun,
    terminal: TerminalDraft,
    write: 'insert' | 'update',
  ): Promise<ResponseEnding> {
    const eventsJson = await joinEvents([
      ...run.events,
      ...terminal.closing.map((e) => e.json),
      terminal.eventJson,
    ]);
    const appends =
      prepared.conversationId !== null &&
      (terminal.status === 'completed' || terminal.status === 'incomplete');
    return {
      insert:
        write === 'insert' ? record(prepared, terminal.responseJson, terminal.status, eventsJson) : undefined,
      update:
        write === 'update'
          ? { id: prepared.response.id, json: terminal.responseJson, status: terminal.status, eventsJson }
          : undefined,
      conversation: appends
        ? {
            id: prepared.conversationId!,
            items: [...prepared.input, ...run.response.output].map((item) => ({
              id: item.id,
              json: JSON.stringify(item),
            })),
          }
        : undefined,
    };
  }

  /** The stored row had already ended (another replica took this one for dead): show what it stored. */
  private async adoptStored(id: string, run: ResponseRun, terminal: TerminalDraft): Promise<TerminalDraft> {
    try {
      const stored = await this.store!.getResponse(id);
      if (!stored || isUnfinished(stored.status)) return terminal;
      this.log.warn({ responseId: id, status: stored.status }, 'background response had ended elsewhere');
      return run.builder.adopt(stored.json, stored.status as ResponseStatus);
    } catch (err) {
      this.log.error({ responseId: id, err }, 'could not read a response that ended elsewhere');
      return terminal;
    }
  }

  /**
   * Writes a background response's failed terminal once storage is back, retrying with backoff
   * for a bounded time, so that nothing stays `in_progress` after an outage.
   */
  private storeLater(id: string, ending: ResponseEnding): void {
    const until = Date.now() + STORE_LATER_WINDOW_MS;
    let delay = 250;
    const attempt = (): void => {
      this.pendingWrites.delete(timer);
      this.store!.finishResponse(ending).then(
        () =>
          this.log.info({ responseId: id }, 'stored the failed background response after storage came back'),
        (err: unknown) => {
          if (this.closed || Date.now() + delay > until) {
            this.log.error({ responseId: id, err }, 'gave up storing the failed background response');
            return;
          }
          delay = Math.min(delay * 2, 5_000);
          timer = setTimeout(attempt, delay).unref();
          this.pendingWrites.add(timer);
        },
      );
    };
    let timer = setTimeout(attempt, delay).unref();
    this.pendingWrites.add(timer);
  }

  /** Stops the deferred writes (the store is about to close). */
  close(): void {
    this.closed = true;
    for (const timer of this.pendingWrites) clearTimeout(timer);
    this.pendingWrites.clear();
  }
}

/** Characters of events joined in one turn of the event loop (see joinEvents). */
const JOIN_SLICE_CHARS = 512 * 1024;

/**
 * Characters of content past which a response's terminal (the done events and the final object,
 * each carrying the whole text) is built in a turn of its own: twenty long runs ending together
 * (a full memory budget ends them within moments) built theirs in one turn, 124 ms of it measured
 * under a 4 KiB-token flood (`npm run bench -- hostile`, issue 48). Below it the turn is not worth
 * its wait: every short response finishes in the turn its engine ended.
 */
const OWN_TURN_CHARS = 256 * 1024;

/** Waits for a turn of the event loop of its own when the terminal to build is large (see OWN_TURN_CHARS). */
export function turnForTerminal(contentChars: number): Promise<void> | undefined {
  return contentChars > OWN_TURN_CHARS ? nextTurn() : undefined;
}

/**
 * The events kept for storage, as the JSON text of an array. Past a slice of about 512 KiB of
 * events, each slice is joined in a turn of the event loop of its own, the first one too (the
 * turn that ended the run has built its terminal already): a long run's tens of MiB of events are
 * not joined in one turn while every other stream and `/health` wait (the join of the whole
 * measured 6 ms a MiB, issue 48). The slices are joined at the end, in one copy.
 */
export async function joinEvents(events: readonly string[]): Promise<string> {
  const ends: number[] = [];
  let chars = 0;
  for (let i = 0; i < events.length; i++) {
    chars += events[i]!.length;
    if (chars < JOIN_SLICE_CHARS) continue;
    ends.push(i + 1);
    chars = 0;
  }
  if (ends.at(-1) !== events.length) ends.push(events.length);
  if (ends.length === 1) return `[${events.join(',')}]`;
  const slices: string[] = [];
  let start = 0;
  for (const end of ends) {
    await nextTurn();
    slices.push(events.slice(start, end).join(','));
    start = end;
  }
  // The brackets go inside the first and last slices: the join then makes one flat string, which
  // the storage thread's sender slices without another copy.
  slices[0] = `[${slices[0]}`;
  slices[slices.length - 1] = `${slices.at(-1)}]`;
  return slices.join(',');
}

/** The store error's code for the metric label (a closed set: the store_* codes). */
function storeErrorCode(err: unknown): string {
  const code = isSluiceError(err) ? err.code : '';
  return code.startsWith('store_') ? code : 'store_error';
}

export function record(
  prepared: PreparedResponse,
  json: string,
  status: string,
  eventsJson: string | null,
): StoredResponse {
  return {
    id: prepared.response.id,
    json,
    status,
    model: prepared.response.model,
    createdAt: prepared.response.created_at,
    previousResponseId: prepared.response.previous_response_id,
    conversationId: prepared.conversationId,
    inputItemsJson: JSON.stringify(prepared.input),
    eventsJson,
    cancelRequested: false,
    ownerKeyId: prepared.ownerKeyId,
  };
}
