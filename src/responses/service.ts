import { filesSchema, mcpSettingsSchema } from '../config/schema.js';
import type { Dispatcher, DispatchRequest, OpenedStream } from '../dispatch/dispatcher.js';
import { ResumableStream, type ResumePlan } from '../dispatch/resumable-stream.js';
import type { SluiceError } from '../errors/base.js';
import { isSluiceError } from '../errors/base.js';
import { ClientDisconnected, InvalidRequest, NotFound, UnmatchedCallOutput } from '../errors/http-errors.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { RequestTrace } from '../observability/tracing.js';
import type { ResponseEnding, Store, StoredResponse } from '../storage/types.js';
import { type ResolvedContext, resolveContext } from './context.js';
import { newId } from './ids.js';
import { extractPdfTexts } from './input-files.js';
import { normaliseInput } from './input-items.js';
import { echoMcpTool, type McpSession, McpTools } from './mcp-loop.js';
import type { OrphanSweeper } from './orphan-sweeper.js';
import { type Caller, visibleTo } from './ownership.js';
import { PdfReader } from './pdf-reader.js';
import type { CreateResponseRequest } from './request-schema.js';
import type { TerminalDraft } from './response-builder.js';
import { ResponseRun, type RunEnd } from './response-run.js';
import { type ChatMessage, contextToMessages, toChatRequest } from './to-chat.js';
import type { InputItem, OutputItem, ResponseObject, ResponseStatus } from './types.js';

/** How the HTTP layer describes a create call. */
export interface CreateCall {
  request: CreateResponseRequest;
  requestId: string;
  /** Whether the model's routing policy wants the prompt text (cache_aware). */
  wantsText: boolean;
  hashKey: string | undefined;
  /** The request's X-Sluice-Resume override. */
  resume: boolean | undefined;
  /** Sees the final usage (for the calling key's counters), once the response has ended. */
  onUsage?: ((usage: { prompt_tokens: number; completion_tokens: number } | undefined) => void) | undefined;
  headers: Record<string, string>;
  /** Aborted when the client goes away (ignored by background responses). */
  signal: AbortSignal;
  receivedAt: number;
  /** The request's spans, when tracing is on and it is sampled. */
  trace?: RequestTrace | undefined;
  /** The calling API key: it owns the response, and may only build on what it owns. */
  caller: Caller;
  /** What came before, already resolved (a WebSocket connection's own cache); else read from the store. */
  context?: ResolvedContext | undefined;
}

export interface Terminal {
  json: string;
  eventJson: string;
  type: string;
  status: string;
}

/** Without MCP settings, no MCP server is allowed. */
const NO_MCP = new McpTools(mcpSettingsSchema.parse({ allowedServers: [], toolCacheMs: 0 }));

/** How often a background run writes its progress (and reads a cancel request). */
const PROGRESS_INTERVAL_MS = 250;
/** Longest the final write waits for a progress write still in flight (the SQL refuses it afterwards anyway). */
const PROGRESS_SETTLE_MS = 5_000;

export interface ResponsesServiceOptions {
  /** This process's replica lease: its background responses are stored as owned by it. */
  replicaId?: string | undefined;
  /** Ends a response at once when the replica that ran it is gone (a cancel of an orphan). */
  orphans?: OrphanSweeper | undefined;
  /** The MCP tool loop's allowlist, tool cache and bounds (none: no MCP server is allowed). */
  mcp?: McpTools | undefined;
  /** Reads the PDFs of `input_file` parts (default: one with the default bounds). */
  pdf?: PdfReader | undefined;
  /** What one run may hold of its events and response (`limits.maxBodyBytes`; default 64 MiB). */
  maxRunBytes?: number | undefined;
}

/** A response that has not ended yet; every other status is final. */
export function isUnfinished(status: string): boolean {
  return status === 'queued' || status === 'in_progress';
}
/** How long a background response's failed terminal is retried after its write failed. */
const STORE_LATER_WINDOW_MS = 5 * 60_000;

/**
 * The Responses API on top of chat-completions workers: translates a request, runs it through
 * the dispatcher, builds the event ladder, and stores exactly what was emitted. Background runs
 * live here, keyed by response id, so that cancel and live replay can find them.
 */
export class ResponsesService {
  private readonly background = new Map<string, { run: ResponseRun; done: Promise<Terminal> }>();
  /** Deferred writes of failed background terminals (see storeLater). */
  private readonly pendingWrites = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(
    private readonly dispatcher: Dispatcher,
    private readonly store: Store | undefined,
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
    private readonly options: ResponsesServiceOptions = {},
  ) {
    this.pdf = options.pdf ?? new PdfReader(filesSchema.parse({}).pdf, metrics, log);
  }

  /** Reads the PDFs of `input_file` parts, bounded, each file once. */
  readonly pdf: PdfReader;

  /** Validates and prepares a create call; throws HTTP errors (404 for unknown ids) before anything starts. */
  async prepare(call: CreateCall): Promise<PreparedResponse> {
    const { request } = call;
    this.dispatcher.assertModel(request.model);
    this.dispatcher.assertOutputTokens(request.model, 'max_output_tokens', request.max_output_tokens);
    const store = request.store !== false;
    if (request.background && !store) {
      throw new InvalidRequest('Background responses need store=true.', 'background', 'invalid_value');
    }
    if (store && !this.store)
      throw new InvalidRequest(
        'This gateway has no storage configured; send store=false.',
        'store',
        'invalid_value',
      );
    const context = call.context ?? (await resolveContext(this.store, request, call.caller));
    const input = normaliseInput(request.input);
    assertOutputsAnswerCalls(context.history, input);
    await extractPdfTexts(this.pdf, [...context.history, ...input]);
    const mcp = await (this.options.mcp ?? NO_MCP).prepare(request, context.history, input, call.signal);
    const messages = contextToMessages(request.instructions, [...context.history, ...input]);
    if (mcp) messages.push(...mcp.messages);
    const response = baseResponse(request, context.previousResponseId, context.conversationId, store);
    const chatBody = toChatRequest(request, messages);
    mcp?.decorate(chatBody);
    const payload = JSON.stringify(chatBody);
    const dispatch: DispatchRequest = {
      api: 'responses',
      path: '/v1/chat/completions',
      model: request.model,
      payload,
      stream: true,
      requestId: call.requestId,
      route: { text: call.wantsText ? messagesText(messages) : undefined, hashKey: call.hashKey },
      rank: undefined,
      headers: call.headers,
      signal: call.signal,
      receivedAt: call.receivedAt,
      trace: call.trace,
    };
    return {
      response,
      input,
      dispatch,
      store,
      conversationId: context.conversationId,
      ownerKeyId: call.caller,
      resume: (dispatchRequest, body = chatBody) =>
        this.dispatcher.resumePlan(dispatchRequest, body, call.resume),
      onUsage: call.onUsage,
      mcp: mcp ? { session: mcp, messages, turns: [] } : undefined,
    };
  }

  /** The engine stream of a run, resumable on another worker when resume is on. */
  private streamOf(prepared: PreparedResponse, opened: OpenedStream): ResumableStream {
    return new ResumableStream(opened, prepared.resume(prepared.dispatch));
  }

  /** Follows a run's engine stream to its end: through the MCP tool loop when the request has MCP tools. */
  private follow(prepared: PreparedResponse, run: ResponseRun, stream: ResumableStream): Promise<RunEnd> {
    if (!prepared.mcp) return run.follow(stream);
    return prepared.mcp.session.run(
      run,
      stream,
      {
        dispatch: () => prepared.dispatch,
        open: (dispatch) => this.dispatcher.openStream(dispatch),
        streamOf: (dispatch, body, opened) => {
          const stream = new ResumableStream(opened, prepared.resume(dispatch, body));
          prepared.mcp?.turns.push(stream);
          return stream;
        },
      },
      [...prepared.mcp.messages],
    );
  }

  /** Notes in the response's metadata that its stream was resumed, and on which workers. */
  private noteResumes(run: ResponseRun, first: ResumableStream, prepared: PreparedResponse): void {
    // Every engine turn of an MCP tool loop counts.
    const streams = [first, ...(prepared.mcp?.turns ?? [])];
    const resumes = streams.reduce((sum, stream) => sum + stream.resumes, 0);
    if (resumes === 0) return;
    // Workers as clients may see them (never host:port; none when `server.exposeWorker` is off).
    const workers = streams.filter((stream) => stream.resumes > 0).flatMap((stream) => stream.clientWorkers);
    run.response.metadata = {
      ...run.response.metadata,
      sluice_resumes: String(resumes),
      ...(workers.length > 0 ? { sluice_workers: workers.join(',') } : {}),
    };
  }

  /** Opens the engine stream for a foreground response (pre-first-byte errors are thrown as HTTP errors). */
  open(prepared: PreparedResponse): Promise<OpenedStream> {
    return this.dispatcher.openStream(prepared.dispatch);
  }

  /** Runs a foreground response to its end; `run` has its writers attached already. */
  async runForeground(
    prepared: PreparedResponse,
    run: ResponseRun,
    opened: OpenedStream,
    signal: AbortSignal,
  ): Promise<Terminal> {
    const onGone = () => run.abandon();
    signal.addEventListener('abort', onGone, { once: true });
    run.builder.begin();
    const stream = this.streamOf(prepared, opened);
    const following = this.follow(prepared, run, stream);
    // The client may have gone while the stream was opening: the listener above would never fire.
    if (signal.aborted) run.abandon();
    const end = await following;
    signal.removeEventListener('abort', onGone);
    this.noteResumes(run, stream, prepared);
    this.count(prepared, end);
    return this.finish(prepared, run, end, 'insert');
  }

  newRun(prepared: PreparedResponse): ResponseRun {
    return new ResponseRun(prepared.response, prepared.store, {
      bytes: this.options.maxRunBytes ?? 64 * 1024 * 1024,
      requestId: prepared.dispatch.requestId,
    });
  }

  /**
   * Starts a background response: stored at once as `queued`, then generated detached from the
   * client. Returns its run (for a streaming client to watch) and the stored JSON.
   */
  async startBackground(prepared: PreparedResponse): Promise<{ run: ResponseRun; queuedJson: string }> {
    prepared.response.status = 'queued';
    const run = this.newRun(prepared);
    // created and queued are stored with it: a replay (from any replica) starts from them.
    run.builder.begin(true);
    const queuedJson = JSON.stringify(prepared.response);
    await this.store!.insertResponse({
      ...record(prepared, queuedJson, 'queued', eventsArray(run.events)),
      ownerReplicaId: this.options.replicaId ?? null,
    });
    // Detached from the client: its own abort signal, never the client's.
    const controller = new AbortController();
    prepared.dispatch = { ...prepared.dispatch, signal: controller.signal };
    const done = this.runBackground(prepared, run, controller);
    this.background.set(prepared.response.id, { run, done });
    void done.finally(() => this.background.delete(prepared.response.id));
    return { run, queuedJson };
  }

  private async runBackground(
    prepared: PreparedResponse,
    run: ResponseRun,
    controller: AbortController,
  ): Promise<Terminal> {
    const id = prepared.response.id;
    let end: RunEnd;
    let ticker: NodeJS.Timeout | undefined;
    // One progress write at a time, and none once the final write starts.
    const progress = { inFlight: undefined as Promise<void> | undefined, written: -1 };
    try {
      const opening = this.dispatcher.openStream(prepared.dispatch);
      const cancelWhileQueued = setInterval(() => {
        void this.store!.getResponse(id).then((r) => {
          if (r?.cancelRequested) controller.abort(new ClientDisconnected());
        });
      }, PROGRESS_INTERVAL_MS);
      let opened: OpenedStream;
      try {
        opened = await opening;
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
      const stream = this.streamOf(prepared, opened);
      end = await this.follow(prepared, run, stream);
      this.noteResumes(run, stream, prepared);
    } catch (err) {
      end = controller.signal.aborted
        ? { kind: 'cancelled' }
        : { kind: 'failed', code: codeOf(err), message: (err as Error).message };
    } finally {
      if (ticker) clearInterval(ticker);
    }
    await settle(progress.inFlight, PROGRESS_SETTLE_MS);
    this.count(prepared, end);
    return this.finish(prepared, run, end, 'update');
  }

  /**
   * Writes a background run's progress (the response so far and every event emitted so far, so
   * that another replica can follow its stream) and honours a cancel request made on any replica.
   */
  private async progress(id: string, run: ResponseRun, state: { written: number }): Promise<void> {
    try {
      const stored = await this.store!.getResponse(id);
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
      const update =
        state.written < 0
          ? { json, status, eventsJson: eventsArray(run.events) }
          : { json, status, appendEventsJson: run.events.slice(state.written).join(',') };
      state.written = -1;
      if (await this.store!.updateResponse(id, update)) state.written = count;
      else run.cancel();
    } catch (err) {
      this.log.warn({ responseId: id, err }, 'could not write background progress');
    }
  }

  /**
   * Builds the terminal event and stores the final object (and the conversation append, in the
   * same transaction), then emits the closing events and the terminal one. When storing fails,
   * the draft is replaced by a `store_write_failed` failure, which is stored instead: what the
   * client sees last is what GET returns, with no gap in the sequence numbers.
   */
  private async finish(
    prepared: PreparedResponse,
    run: ResponseRun,
    end: RunEnd,
    write: 'insert' | 'update',
  ): Promise<Terminal> {
    let terminal = run.builder.terminal(end);
    if (prepared.store && this.store) {
      try {
        const stored = await this.store.finishResponse(this.ending(prepared, run, terminal, write));
        if (!stored) terminal = await this.adoptStored(prepared.response.id, run, terminal);
      } catch (err) {
        this.log.error({ responseId: prepared.response.id, err }, 'storing the response failed');
        this.metrics.storeWriteFailures.inc({ backend: this.store.kind, code: storeErrorCode(err) });
        // Never silent: the client learns in the terminal event that nothing was stored.
        terminal = run.builder.terminal({
          kind: 'failed',
          code: 'store_write_failed',
          message: `The response could not be stored: ${(err as Error).message}`,
        });
        try {
          await this.store.finishResponse(this.ending(prepared, run, terminal, write));
        } catch (again) {
          this.log.error(
            { responseId: prepared.response.id, err: again },
            'storing the failed response failed too',
          );
          // A background response is stored as queued/in_progress already: it must not stay so.
          if (write === 'update')
            this.storeLater(prepared.response.id, this.ending(prepared, run, terminal, write));
        }
      }
    }
    for (const event of terminal.closing) run.publish(event.json, event.type);
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
    };
  }

  /** The writes that end a response: its final object and events, and its conversation's new items. */
  private ending(
    prepared: PreparedResponse,
    run: ResponseRun,
    terminal: TerminalDraft,
    write: 'insert' | 'update',
  ): ResponseEnding {
    const eventsJson = eventsArray([
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
    void this.pdf.close();
    for (const timer of this.pendingWrites) clearTimeout(timer);
    this.pendingWrites.clear();
  }

  private count(prepared: PreparedResponse, end: RunEnd): void {
    if (end.kind !== 'failed' || !end.error) return;
    if (end.error instanceof ClientDisconnected) {
      this.metrics.clientGone('responses', prepared.response.model);
    } else {
      this.metrics.streamFailed('responses', prepared.response.model, end.error.reason);
    }
  }

  /** A stored response the caller may see (404 otherwise). */
  async retrieve(id: string, caller: Caller): Promise<StoredResponse> {
    const stored = this.store ? await this.store.getResponse(id) : undefined;
    if (!stored || !visibleTo(stored.ownerKeyId, caller))
      throw new NotFound(`No response found with id '${id}'.`, 'response_not_found', 'response_id');
    return stored;
  }

  /** Waits (at most `ms`) for the background runs of this process to store their end. */
  async settle(ms: number): Promise<void> {
    await settle(Promise.allSettled([...this.background.values()].map((b) => b.done)), ms);
  }

  /** The live run of a background response in this process, if any. */
  liveRun(id: string): ResponseRun | undefined {
    return this.background.get(id)?.run;
  }

  async delete(id: string, caller: Caller): Promise<void> {
    await this.retrieve(id, caller);
    this.background.get(id)?.run.cancel();
    const deleted = this.store ? await this.store.deleteResponse(id) : false;
    if (!deleted)
      throw new NotFound(`No response found with id '${id}'.`, 'response_not_found', 'response_id');
  }

  /** Cancels a background response; returns its object once the cancellation is stored. */
  async cancel(id: string, caller: Caller): Promise<string> {
    const stored = await this.retrieve(id, caller);
    const object = JSON.parse(stored.json) as ResponseObject;
    if (!object.background) {
      throw new InvalidRequest('Only background responses can be cancelled.', 'response_id', 'invalid_value');
    }
    if (!isUnfinished(stored.status)) return stored.json;
    await this.store!.requestCancel(id);
    const local = this.background.get(id);
    if (local) {
      local.run.cancel();
      return (await local.done).json;
    }
    // The replica running it is gone: end it now instead of waiting for a reader that will not come.
    const recovered = await this.options.orphans?.recover(id);
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

export interface PreparedResponse {
  response: ResponseObject;
  input: InputItem[];
  dispatch: DispatchRequest;
  store: boolean;
  conversationId: string | null;
  /** The API key that owns the response (null: made while the gateway ran open). */
  ownerKeyId: Caller;
  /** How the stream may be resumed mid-stream (undefined: it may not). */
  resume: (dispatch: DispatchRequest, body?: Record<string, unknown>) => ResumePlan | undefined;
  /** The MCP tool loop of the response (its MCP servers, and the chat messages of its first turn). */
  mcp?: { session: McpSession; messages: ChatMessage[]; turns: ResumableStream[] } | undefined;
  onUsage: CreateCall['onUsage'];
}

/**
 * Refuses a `function_call_output` of `input` that answers no `function_call` before it (in the
 * history it continues, or earlier in the input): a 400 naming the item.
 */
function assertOutputsAnswerCalls(
  history: readonly (InputItem | OutputItem)[],
  input: readonly InputItem[],
): void {
  if (!input.some((item) => item.type === 'function_call_output')) return;
  const callId = (item: InputItem | OutputItem) => String((item as { call_id?: unknown }).call_id);
  const calls = new Set<string>();
  for (const item of history) if (item.type === 'function_call') calls.add(callId(item));
  input.forEach((item, index) => {
    if (item.type === 'function_call') calls.add(callId(item));
    else if (item.type === 'function_call_output' && !calls.has(callId(item)))
      throw new UnmatchedCallOutput(index, callId(item));
  });
}

/** The prompt as text, for prefix-aware routing (the same shape the chat route uses). */
function messagesText(messages: readonly ChatMessage[]): string {
  let text = '';
  for (const message of messages)
    if (typeof message.content === 'string') text += `${message.role}:${message.content}\n`;
  return text;
}

/** The events kept for storage, as the JSON text of an array. */
function eventsArray(events: readonly string[]): string {
  return `[${events.join(',')}]`;
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

/** The store error's code for the metric label (a closed set: the store_* codes). */
function storeErrorCode(err: unknown): string {
  const code = isSluiceError(err) ? err.code : '';
  return code.startsWith('store_') ? code : 'store_error';
}

function codeOf(err: unknown): string {
  return isSluiceError(err) ? (err as SluiceError).code : 'internal_error';
}

function record(
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

function baseResponse(
  request: CreateResponseRequest,
  previousResponseId: string | null,
  conversationId: string | null,
  store: boolean,
): ResponseObject {
  return {
    id: newId('resp'),
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'in_progress',
    background: request.background === true,
    completed_at: null,
    error: null,
    incomplete_details: null,
    instructions: request.instructions ?? null,
    max_output_tokens: request.max_output_tokens ?? null,
    model: request.model,
    output: [],
    parallel_tool_calls: request.parallel_tool_calls ?? true,
    previous_response_id: previousResponseId,
    conversation: conversationId ? { id: conversationId } : null,
    reasoning: { effort: request.reasoning?.effort ?? null, summary: request.reasoning?.summary ?? null },
    store,
    temperature: request.temperature ?? 1,
    text: { format: echoedFormat(request.text?.format as Record<string, unknown> | undefined) },
    tool_choice: request.tool_choice ?? 'auto',
    tools: (request.tools ?? []).map((tool) =>
      tool.type === 'mcp'
        ? echoMcpTool(tool)
        : {
            type: 'function',
            name: tool.name,
            description: tool.description ?? null,
            parameters: tool.parameters ?? null,
            strict: tool.strict ?? true,
          },
    ),
    top_p: request.top_p ?? 1,
    truncation: request.truncation ?? 'disabled',
    presence_penalty: request.presence_penalty ?? 0,
    frequency_penalty: request.frequency_penalty ?? 0,
    top_logprobs: request.top_logprobs ?? 0,
    max_tool_calls: request.max_tool_calls ?? null,
    service_tier: request.service_tier ?? 'default',
    safety_identifier: request.safety_identifier ?? null,
    prompt_cache_key: request.prompt_cache_key ?? null,
    usage: null,
    user: request.user ?? null,
    metadata: request.metadata ?? {},
  };
}

/**
 * The text format as the response echoes it. A `json_schema` format carries every field Open
 * Responses requires of it (`name`, `description`, `schema`, `strict`), those the request left out
 * as null (description) or false (strict, the API's default).
 */
function echoedFormat(format: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!format) return { type: 'text' };
  if (format.type !== 'json_schema') return format;
  return { ...format, description: format.description ?? null, strict: format.strict ?? false };
}
