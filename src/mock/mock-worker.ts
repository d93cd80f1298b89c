import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Clock } from './clock.js';
import type { EngineModel } from './engine-model.js';
import type { EngineOptions } from './engine-options.js';
import { MockEngine } from './engine-run.js';
import { sendError } from './http-io.js';
import { mockRoutes } from './routes.js';
import { type MockWorkerStats, type UtilityFault, WorkerState } from './worker-state.js';

export type { EngineModel, EngineStats } from './engine-model.js';
export { ENGINE_DEFAULTS, type EngineOptions } from './engine-options.js';
export { FAULTS, type FaultName, FaultSpecError, type Faults, parseFault } from './faults.js';
export { sequence, token } from './generate.js';
export type { MockWorkerStats, UtilityFault } from './worker-state.js';

/**
 * An OpenAI-compatible engine for tests and benchmarks, shaped like vLLM's OpenAI server, with
 * fault injection (see faults.ts) and deterministic output (see generate.ts). Raw node:http and
 * one shared clock (clock.ts): it must never be the bottleneck of a benchmark of the gateway.
 *
 * Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions,
 * POST /flush_cache, POST /reset_prefix_cache, GET /is_sleeping, POST /sleep, POST /wake_up,
 * GET /mock/stats, POST /mock/fault {"fault": "..."}; the embeddings, rerank, score and
 * tokenizer endpoints of pooling-endpoints.ts; with an engine model, GET /metrics,
 * GET /mock/engine (its counters) and GET /mock/engine/requests (the requests traced with
 * `x-mock-trace-id` that ended since the last call, with their times on the engine's clock).
 *
 * Request headers it reads: `x-request-id`, `x-data-parallel-rank`, `x-mock-fault: <spec>`,
 * `x-mock-tool-call: <function name>` (with `tools`), `x-mock-reasoning: <N tokens>`,
 * `x-mock-tool-script: <JSON>` (a scripted tool loop, see `scriptStepOf` in generation-request.ts),
 * `x-mock-trace-id: <id>` (with an engine model: keep the request's times under that id).
 */
export interface MockWorkerOptions {
  /** 0 = an ephemeral port (default). */
  port?: number | undefined;
  /** Default 127.0.0.1. */
  host?: string | undefined;
  /** Default ['mock-model']. */
  models?: string[] | undefined;
  /** Token chunks per second per stream; 0 (default) = as fast as possible, one event per event-loop turn. */
  tokensPerSecond?: number | undefined;
  /**
   * SSE events gathered into one socket write (default 1: every event is its own write). More
   * imitates vLLM's --stream-interval and cuts syscalls for benchmarks; tokens then come in bursts.
   */
  eventsPerWrite?: number | undefined;
  /** Tokens generated when a request sets no max_tokens (default 16; the finish is then "stop"). */
  defaultMaxTokens?: number | undefined;
  /** A fault applied to every request without an `x-mock-fault` header (same syntax). */
  fault?: string | undefined;
  /** Data-parallel size; requests may carry `x-data-parallel-rank` in [0, dpSize). Default 1. */
  dpSize?: number | undefined;
  /** The context length `/v1/models` reports for every model (`max_model_len`, as vLLM does); none by default. */
  maxModelLen?: number | undefined;
  /** Serve vLLM's `/tokenize` and `/detokenize` (default false: an engine without a tokenizer, as SGLang). */
  tokenizer?: boolean | undefined;
  /**
   * An engine model (engine-model.ts) behind the endpoints: continuous batching, a waiting queue,
   * a paged prefix cache, tokens paced by its steps (`tokensPerSecond` is then unused), LoRA
   * adapters (served as models) and `GET /metrics` with vLLM's names. None by default.
   */
  engine?: EngineOptions | undefined;
}

export interface MockWorker {
  readonly url: string;
  readonly port: number;
  readonly stats: MockWorkerStats;
  /** The engine model, when the worker has one. */
  readonly engine: EngineModel | undefined;
  /** Sets the worker-wide fault; throws FaultSpecError on an invalid spec. */
  /** The worker-wide fault, or with `model` that model's only (see WorkerState.setFault). */
  setFault(fault: string | undefined, model?: string): void;
  /** `GET /health` answers 503 while false. */
  setHealthy(ok: boolean): void;
  setUtilityFault(fault: UtilityFault): void;
  /** Destroys every open connection at once, like a killed process. */
  close(): Promise<void>;
}

export async function createMockWorker(options: MockWorkerOptions = {}): Promise<MockWorker> {
  const models = options.models && options.models.length > 0 ? [...options.models] : ['mock-model'];
  const tokensPerSecond = options.tokensPerSecond ?? 0;
  if (!(tokensPerSecond >= 0)) throw new Error(`tokensPerSecond must be >= 0, got ${tokensPerSecond}`);
  const intervalMs = tokensPerSecond > 0 ? 1000 / tokensPerSecond : 0;
  const eventsPerWrite = options.eventsPerWrite ?? 1;
  if (!Number.isInteger(eventsPerWrite) || eventsPerWrite < 1) {
    throw new Error(`eventsPerWrite must be an integer >= 1, got ${eventsPerWrite}`);
  }
  const state = new WorkerState(options.fault);
  const clock = new Clock();
  const engine = options.engine ? new MockEngine(options.engine, clock, models[0]!) : undefined;
  const route = mockRoutes(
    {
      models,
      dpSize: options.dpSize ?? 1,
      defaultMaxTokens: options.defaultMaxTokens ?? 16,
      maxModelLen: options.maxModelLen,
      tokenizer: options.tokenizer ?? false,
      pacing: { clock, intervalMs, eventsPerWrite },
      engine,
    },
    state,
  );
  const sockets = new Set<Socket>();

  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      if (res.headersSent) res.destroy();
      else sendError(res, 500, err instanceof Error ? err.message : String(err));
    });
  });
  server.keepAliveTimeout = 60_000;
  server.on('connection', (socket) => {
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // A deep accept queue: a benchmark opens its 1000 streams at once (the kernel caps it at somaxconn).
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', 4096, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    port: address.port,
    stats: state.stats,
    engine: engine?.model,
    setFault(fault, model) {
      state.setFault(fault, model);
    },
    setHealthy(ok) {
      state.healthy = ok;
    },
    setUtilityFault(fault) {
      state.utilityFault = fault;
    },
    close() {
      return new Promise<void>((resolve) => {
        clock.close();
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      });
    },
  };
}
