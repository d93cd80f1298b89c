import type { Engine } from '../dispatch/engine.js';
import type { ResumableStream } from '../dispatch/resumable-stream.js';
import type { HeldBytes } from '../memory/held-bytes.js';
import type { Logger } from '../observability/logger.js';
import type { Store, StoredResponse } from '../storage/types.js';
import { BackgroundRuns } from './background-runs.js';
import { DurableFinisher } from './durable-finish.js';
import type { McpTools } from './mcp-loop.js';
import type { OrphanSweeper } from './orphan-sweeper.js';
import type { Caller } from './ownership.js';
import type { PdfReader } from './pdf-reader.js';
import type { ResponseRun, RunEnd } from './response-run.js';
import { ResponseRunner } from './response-runner.js';
import { StoredResponses } from './stored-responses.js';
import type { Terminal } from './terminal.js';
import { type CreateCall, type PreparedResponse, ResponseTranslator } from './translate.js';

export { isUnfinished, type Terminal } from './terminal.js';
export type { CreateCall, PreparedResponse } from './translate.js';

export interface ResponsesServiceOptions {
  /** Reads the PDFs of `input_file` parts. */
  pdf: PdfReader;
  /** The MCP tool loop's allowlist, tool cache and bounds (none: no MCP server is allowed). */
  mcp?: McpTools | undefined;
  /** This process's replica lease: its background responses are stored as owned by it. */
  replicaId?: string | undefined;
  /** Ends a response at once when the replica that ran it is gone (a cancel of an orphan). */
  orphans?: OrphanSweeper | undefined;
  /** What one run may hold of its events and response (`limits.maxBodyBytes`). */
  maxRunBytes: number;
  /** What all requests together hold (`limits.maxHeldBytes`). */
  held?: HeldBytes | undefined;
  /** Told of each final write that failed. */
  onWriteFailed: (backend: string, code: string) => void;
  /** Told how each background run ended (the foreground ones are counted by the pipeline). */
  onBackgroundEnded: (model: string, end: RunEnd) => void;
}

/**
 * The Responses API on chat-completions engines, by what each part does: the translation of a
 * create (ResponseTranslator), running it (ResponseRunner), background runs (BackgroundRuns), the
 * one durable terminal write (DurableFinisher), and stored responses with cancel
 * (StoredResponses). The pipeline drives a create through these; the read routes use the last.
 */
export class ResponsesService {
  private readonly translator: ResponseTranslator;
  private readonly runner: ResponseRunner;
  private readonly finisher: DurableFinisher;
  private readonly background: BackgroundRuns | undefined;
  private readonly stored: StoredResponses;

  constructor(engine: Engine, store: Store | undefined, log: Logger, options: ResponsesServiceOptions) {
    this.translator = new ResponseTranslator(engine, store, options.pdf, options.mcp);
    this.finisher = new DurableFinisher(store, log, options.onWriteFailed);
    this.runner = new ResponseRunner(engine, this.finisher, options.maxRunBytes, options.held);
    this.background =
      store && new BackgroundRuns(this.runner, store, log, options.replicaId, options.onBackgroundEnded);
    this.stored = new StoredResponses(store, this.background, options.orphans);
  }

  /** Reads the PDFs of `input_file` parts, bounded, each file once. */
  get pdf(): PdfReader {
    return this.translator.pdf;
  }

  /** Validates and translates a create call; throws typed errors before anything starts. */
  prepare(call: CreateCall): Promise<PreparedResponse> {
    return this.translator.prepare(call);
  }

  /** Opens the engine stream of a foreground response (errors before its first byte are thrown). */
  open(prepared: PreparedResponse): Promise<ResumableStream> {
    return this.runner.open(prepared);
  }

  newRun(prepared: PreparedResponse): ResponseRun {
    return this.runner.newRun(prepared);
  }

  /** Runs a foreground response to its stored end; `run` has its writers attached already. */
  runForeground(
    prepared: PreparedResponse,
    run: ResponseRun,
    stream: ResumableStream,
    signal: AbortSignal,
  ): Promise<Terminal> {
    return this.runner.runForeground(prepared, run, stream, signal);
  }

  /** Starts a background response (stored as queued first); its run, and the queued JSON. */
  startBackground(prepared: PreparedResponse): Promise<{ run: ResponseRun; queuedJson: string }> {
    if (!this.background) throw new Error('background responses need storage');
    return this.background.start(prepared);
  }

  /** The live run of a background response in this process, if any. */
  liveRun(id: string): ResponseRun | undefined {
    return this.background?.liveRun(id);
  }

  retrieve(id: string, caller: Caller): Promise<StoredResponse> {
    return this.stored.retrieve(id, caller);
  }

  delete(id: string, caller: Caller): Promise<void> {
    return this.stored.delete(id, caller);
  }

  /** Cancels a background response; returns its object once the cancellation is stored. */
  cancel(id: string, caller: Caller): Promise<string> {
    return this.stored.cancel(id, caller);
  }

  /** Waits (at most `ms`) for the background runs of this process to store their end. */
  async settle(ms: number): Promise<void> {
    await this.background?.settle(ms);
  }

  /** Stops the deferred writes and the PDF threads (the gateway is closing). */
  close(): void {
    this.finisher.close();
    void this.translator.pdf.close();
  }
}
