import type { Engine } from '../dispatch/engine.js';
import type { ResumableStream } from '../dispatch/resumable-stream.js';
import type { HeldBytes } from '../memory/held-bytes.js';
import type { DurableFinisher } from './durable-finish.js';
import { ResponseRun, type RunEnd } from './response-run.js';
import type { Terminal } from './terminal.js';
import type { PreparedResponse } from './translate.js';

/**
 * Runs a prepared response on the engines: opens its stream, follows it into the event ladder
 * (through the MCP tool loop's turns when it has MCP tools), notes where it was resumed, and
 * ends it with the one durable terminal write. Foreground runs are followed here; background
 * ones by BackgroundRuns, with the same parts.
 */
export class ResponseRunner {
  constructor(
    private readonly engine: Pick<Engine, 'openResumable'>,
    readonly finisher: DurableFinisher,
    /** What one run may hold of its events and response (`limits.maxBodyBytes`). */
    private readonly maxRunBytes: number,
    /** What all requests together hold (`limits.maxHeldBytes`): each run has its account. */
    private readonly held?: HeldBytes | undefined,
  ) {}

  /**
   * Opens a response's engine stream, resumable on another worker when resume is on (errors
   * before its first byte are thrown as HTTP errors).
   */
  open(prepared: PreparedResponse): Promise<ResumableStream> {
    return this.engine.openResumable(prepared.dispatch, prepared.resume(prepared.dispatch));
  }

  /** Runs a foreground response to its end; `run` has its writers attached already. */
  async runForeground(
    prepared: PreparedResponse,
    run: ResponseRun,
    stream: ResumableStream,
    signal: AbortSignal,
  ): Promise<Terminal> {
    const onGone = () => run.abandon();
    signal.addEventListener('abort', onGone, { once: true });
    run.builder.begin();
    const following = this.follow(prepared, run, stream);
    // The client may have gone while the stream was opening: the listener above would never fire.
    if (signal.aborted) run.abandon();
    const end = await following;
    signal.removeEventListener('abort', onGone);
    this.noteResumes(run, stream, prepared);
    return this.finish(prepared, run, end, 'insert');
  }

  /** Stores a run's end (the one durable terminal write), then gives back what it held. */
  async finish(
    prepared: PreparedResponse,
    run: ResponseRun,
    end: RunEnd,
    mode: 'insert' | 'update',
  ): Promise<Terminal> {
    try {
      return await this.finisher.finish(prepared, run, end, mode);
    } finally {
      run.release();
    }
  }

  /** A run of the response, its events kept when it is stored. */
  newRun(prepared: PreparedResponse): ResponseRun {
    return new ResponseRun(prepared.response, prepared.store, {
      bytes: this.maxRunBytes,
      requestId: prepared.dispatch.requestId,
      hold: this.held?.hold(),
    });
  }

  /** Follows a run's engine stream to its end: through the MCP tool loop when the request has MCP tools. */
  follow(prepared: PreparedResponse, run: ResponseRun, stream: ResumableStream): Promise<RunEnd> {
    if (!prepared.mcp) return run.follow(stream);
    return prepared.mcp.session.run(
      run,
      stream,
      {
        dispatch: () => prepared.dispatch,
        open: async (dispatch, body) => {
          const stream = await this.engine.openResumable(dispatch, prepared.resume(dispatch, body));
          prepared.mcp?.turns.push(stream);
          return stream;
        },
      },
      [...prepared.mcp.messages],
    );
  }

  /** Notes in the response's metadata that its stream was resumed, and on which workers. */
  noteResumes(run: ResponseRun, first: ResumableStream, prepared: PreparedResponse): void {
    // Every engine turn of an MCP tool loop counts.
    const streams = [first, ...(prepared.mcp?.turns ?? [])];
    this.noteModels(run, streams);
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

  /**
   * A response answered (in part or whole) by a fallback says so: its `model` is the model that
   * produced its last part, and `metadata.sluice_models` lists the models that answered, in order.
   */
  private noteModels(run: ResponseRun, streams: readonly ResumableStream[]): void {
    const models: string[] = [];
    for (const stream of streams)
      for (const model of stream.models) if (models.at(-1) !== model) models.push(model);
    const asked = run.response.model;
    if (models.length === 0 || (models.length === 1 && models[0] === asked)) return;
    run.response.model = models.at(-1)!;
    run.response.metadata = { ...run.response.metadata, sluice_models: models.join(',') };
  }
}
