import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { basename } from 'node:path';
import type { LlamaContextSequence, LlamaGrammar } from 'node-llama-cpp';
import { EngineMetrics } from './engine-metrics.js';
import { readBody, sendJson } from './http-io.js';
import { LlamaEngine } from './llama-engine.js';
import { type Api, errorBody, responseId } from './openai-shapes.js';
import { POOLING_PATHS, servePooling } from './pooling-endpoints.js';
import { type PreparedRequest, prepareRequest } from './prepare-request.js';
import { RequestError } from './request-schema.js';
import { SlotWaitAborted } from './slot-pool.js';
import type { LlamaWorkerStats } from './worker-stats.js';
import { StreamFailed, writeResponse } from './write-response.js';

/**
 * An OpenAI-compatible server over llama.cpp, shaped like vLLM's: `/health`, `/v1/models`,
 * `/v1/chat/completions`, `/v1/completions` (streaming or not), `/v1/embeddings`, `/tokenize`,
 * `/detokenize` (pooling-endpoints.ts), `/metrics` (vLLM's names, see engine-metrics.ts) and
 * `/worker/stats`. Up to
 * `slots` requests generate at once; the others wait in FIFO order. A client that goes away
 * stops its generation at once and frees its slot. Raw node:http: five routes need no framework.
 */
export interface LlamaWorkerOptions {
  modelPath: string;
  port?: number | undefined;
  host?: string | undefined;
  slots?: number | undefined;
  /** The name clients use; defaults to the file name without `.gguf`. */
  modelName?: string | undefined;
  contextSize?: number | undefined;
  threads?: number | undefined;
}

export interface LlamaWorker {
  readonly url: string;
  readonly port: number;
  readonly modelName: string;
  readonly contextSize: number;
  /** Time to load the runtime and the model, in ms. */
  readonly loadMs: number;
  readonly stats: LlamaWorkerStats;
  /** Aborts every request, then frees the model. */
  close(): Promise<void>;
}

export async function createLlamaWorker(options: LlamaWorkerOptions): Promise<LlamaWorker> {
  const engine = await LlamaEngine.load({
    modelPath: options.modelPath,
    slots: options.slots ?? 4,
    contextSize: options.contextSize,
    threads: options.threads,
  });
  const modelName = options.modelName ?? basename(options.modelPath).replace(/\.gguf$/i, '');
  const stats: LlamaWorkerStats = {
    requests: 0,
    inflight: 0,
    queued: 0,
    aborted: 0,
    completed: 0,
    failed: 0,
  };
  const metrics = new EngineMetrics(modelName, () => ({
    waiting: stats.queued,
    running: stats.inflight,
    kvCacheUsage: engine.kvCacheUsage,
    prefixCacheQueries: engine.prefixCache.queries,
    prefixCacheHits: engine.prefixCache.hits,
  }));
  const sockets = new Set<Socket>();
  const running = new Set<Promise<void>>();
  const controllers = new Set<AbortController>();
  let closing = false;

  const server = createServer((req, res) => {
    const handling = handle(req, res).catch((err: unknown) => {
      if (err instanceof StreamFailed) return;
      if (!res.headersSent) sendJson(res, 500, errorBody(String(err), 500));
      else res.destroy();
    });
    running.add(handling);
    void handling.finally(() => running.delete(handling));
  });
  server.keepAliveTimeout = 60_000;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (req.method === 'GET' && path === '/health')
      return sendJson(res, closing ? 503 : 200, closing ? '{"status":"closing"}' : '{}');
    if (req.method === 'GET' && path === '/v1/models') {
      const card = {
        id: modelName,
        object: 'model',
        created: Math.floor(Date.now() / 1000),
        owned_by: 'sluice',
        root: options.modelPath,
        max_model_len: engine.contextSize,
        // What it serves (sluice's convention, read by the gateway): every model generates and embeds.
        kind: ['chat', 'embedding'],
      };
      return sendJson(res, 200, JSON.stringify({ object: 'list', data: [card] }));
    }
    if (req.method === 'GET' && path === '/worker/stats') return sendJson(res, 200, JSON.stringify(stats));
    if (req.method === 'GET' && path === '/metrics') {
      const text = await metrics.render();
      res.writeHead(200, { 'content-type': metrics.contentType, 'content-length': Buffer.byteLength(text) });
      res.end(text);
      return;
    }
    if (req.method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions'))
      return generate(req, res, path === '/v1/chat/completions' ? 'chat' : 'completions');
    if (req.method === 'POST' && POOLING_PATHS.has(path))
      return servePooling(req, res, path, { engine, modelName, stats, closing: () => closing });
    sendJson(res, 404, errorBody(`Not found: ${req.method} ${path}`, 404));
  }

  function prepare(raw: string, api: Api): PreparedRequest {
    let body: unknown;
    try {
      body = JSON.parse(raw);
    } catch {
      throw new RequestError('Invalid JSON body.', 400);
    }
    return prepareRequest(engine, api, body, modelName);
  }

  async function generate(req: IncomingMessage, res: ServerResponse, api: Api): Promise<void> {
    stats.requests++;
    let raw: string;
    try {
      raw = await readBody(req);
    } catch (err) {
      stats.aborted++;
      throw err;
    }
    if (closing) {
      stats.failed++;
      return sendJson(res, 503, errorBody('The worker is shutting down.', 503));
    }
    let request: PreparedRequest;
    try {
      request = prepare(raw, api);
    } catch (err) {
      stats.failed++;
      if (err instanceof RequestError)
        return sendJson(res, err.status, errorBody(err.message, err.status, err.detail));
      throw err;
    }
    let grammar: LlamaGrammar | undefined;
    if (request.toolCall) {
      try {
        grammar = await engine.jsonGrammar(request.toolCall.schema);
      } catch (err) {
        stats.failed++;
        const message = `The tool's parameters schema cannot be turned into a grammar: ${(err as Error).message}`;
        return sendJson(res, 400, errorBody(message, 400, { param: 'tools' }));
      }
    }

    const controller = new AbortController();
    const { signal } = controller;
    controllers.add(controller);
    res.on('close', () => {
      if (!res.writableFinished) controller.abort();
    });
    let sequence: LlamaContextSequence;
    stats.queued++;
    try {
      sequence = await engine.acquire(signal);
    } catch (err) {
      controllers.delete(controller);
      if (!(err instanceof SlotWaitAborted)) throw err;
      if (signal.aborted) stats.aborted++;
      else {
        stats.failed++;
        sendJson(res, 503, errorBody(err.message, 503));
      }
      return;
    } finally {
      stats.queued--;
    }

    stats.inflight++;
    let failed = false;
    try {
      const requestId = req.headers['x-request-id'];
      const id = responseId(api, typeof requestId === 'string' ? requestId : undefined);
      await writeResponse({ res, api, id, model: modelName, request, signal }, (onText) =>
        engine.generate(sequence, request.prompt, request.sampling, signal, onText, grammar),
      );
    } catch (err) {
      failed = true;
      throw err;
    } finally {
      engine.release(sequence);
      controllers.delete(controller);
      stats.inflight--;
      if (signal.aborted) stats.aborted++;
      else if (failed) stats.failed++;
      else stats.completed++;
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  }).catch(async (err: unknown) => {
    await engine.close();
    throw err;
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;

  return {
    url: `http://${host}:${address.port}`,
    port: address.port,
    modelName,
    contextSize: engine.contextSize,
    loadMs: engine.loadMs,
    stats,
    async close() {
      if (closing) return;
      closing = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const controller of controllers) controller.abort();
      for (const socket of sockets) socket.destroy();
      // Generations end within a token; the model is freed only once none runs.
      await Promise.allSettled([...running]);
      await closed;
      await engine.close();
    },
  };
}

export type { LlamaWorkerStats } from './worker-stats.js';
