import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import {
  type Api,
  type ChoiceResult,
  ChunkWriter,
  completeBody,
  engineError,
  responseId,
  TOOL_ARGUMENTS,
} from './chunks.js';
import { FaultSpecError, type Faults, parseFault } from './faults.js';
import { countWords, token, tokensAlreadyWritten } from './tokens.js';

export { FaultSpecError, parseFault } from './faults.js';

/**
 * An OpenAI-compatible engine for tests and benchmarks, shaped like vLLM's server, with fault
 * injection (see faults.ts). Raw node:http, not a framework: it must never be the bottleneck
 * of a benchmark of the gateway in front of it.
 */
export interface MockWorkerOptions {
  port?: number | undefined;
  host?: string | undefined;
  models?: string[] | undefined;
  /** Tokens per second per stream; 0 = as fast as the connection takes them. */
  tokensPerSecond?: number | undefined;
  /** Tokens generated when a request sets no max_tokens. */
  defaultMaxTokens?: number | undefined;
  /** A fault applied to every request without an X-Mock-Fault header. */
  fault?: string | undefined;
  /** Data-parallel ranks; requests may carry X-Data-Parallel-Rank. */
  dpSize?: number | undefined;
}

export interface MockWorkerStats {
  requests: number;
  inflight: number;
  aborted: number;
  completed: number;
  /** X-Request-Id of every generation request, in order. */
  requestIds: string[];
  /** X-Data-Parallel-Rank of every generation request (null when absent). */
  ranks: (number | null)[];
  /** The last 50 request bodies and headers. */
  lastBodies: unknown[];
  lastHeaders: Record<string, string | string[] | undefined>[];
}

export type UtilityFault = 'http_500' | 'garbage' | 'hang' | undefined;

export interface MockWorker {
  readonly url: string;
  readonly port: number;
  readonly stats: MockWorkerStats;
  setFault(fault: string | undefined): void;
  setHealthy(ok: boolean): void;
  setUtilityFault(fault: UtilityFault): void;
  /** Destroys every open connection at once, like a killed process. */
  close(): Promise<void>;
}

const KEEP = 50;

interface GenerationRequest {
  model?: unknown;
  stream?: unknown;
  max_tokens?: unknown;
  max_completion_tokens?: unknown;
  n?: unknown;
  stop?: unknown;
  messages?: { role?: unknown; content?: unknown }[];
  prompt?: unknown;
  stream_options?: { include_usage?: unknown } | null;
  tools?: unknown[];
  tool_choice?: unknown;
  continue_final_message?: unknown;
  add_generation_prompt?: unknown;
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p) => (typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : ''))
      .join('');
  }
  return '';
}

function send(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(body);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', reject);
  });
}

function keep<T>(list: T[], item: T): void {
  list.push(item);
  if (list.length > KEEP) list.shift();
}

export async function createMockWorker(options: MockWorkerOptions = {}): Promise<MockWorker> {
  const models = options.models && options.models.length > 0 ? options.models : ['mock-model'];
  const tokensPerSecond = options.tokensPerSecond ?? 0;
  const defaultMaxTokens = options.defaultMaxTokens ?? 16;
  const dpSize = options.dpSize ?? 1;
  let workerFault = options.fault;
  parseFault(workerFault);
  let healthy = true;
  let sleeping = false;
  let utilityFault: UtilityFault;
  const sockets = new Set<Socket>();
  const stats: MockWorkerStats = {
    requests: 0,
    inflight: 0,
    aborted: 0,
    completed: 0,
    requestIds: [],
    ranks: [],
    lastBodies: [],
    lastHeaders: [],
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, engineError(String(err), 'InternalServerError', 500));
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 60_000;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/health')
      return send(res, healthy ? 200 : 503, healthy ? '{}' : '{"status":"unhealthy"}');
    if (req.method === 'GET' && path === '/v1/models') {
      const created = Math.floor(Date.now() / 1000);
      return send(
        res,
        200,
        JSON.stringify({
          object: 'list',
          data: models.map((id) => ({ id, object: 'model', created, owned_by: 'sluice-mock' })),
        }),
      );
    }
    if (req.method === 'GET' && path === '/mock/stats') return send(res, 200, JSON.stringify(stats));
    if (req.method === 'POST' && path === '/mock/fault') {
      const { fault } = JSON.parse((await readBody(req)) || '{}') as { fault?: string };
      try {
        parseFault(fault);
      } catch (err) {
        return send(res, 400, engineError((err as Error).message, 'BadRequestError', 400));
      }
      workerFault = fault;
      return send(res, 200, '{}');
    }
    const utility = UTILITIES[`${req.method} ${path}`];
    if (utility) return serveUtility(res, utility);
    if (req.method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions')) {
      return generate(req, res, path === '/v1/chat/completions' ? 'chat' : 'completions');
    }
    send(res, 404, engineError(`Not found: ${req.method} ${path}`, 'NotFoundError', 404));
  }

  const UTILITIES: Record<string, () => string> = {
    'POST /flush_cache': () => '{}',
    'POST /reset_prefix_cache': () => '{}',
    'GET /is_sleeping': () => JSON.stringify({ is_sleeping: sleeping }),
    'POST /sleep': () => {
      sleeping = true;
      return '{}';
    },
    'POST /wake_up': () => {
      sleeping = false;
      return '{}';
    },
  };

  function serveUtility(res: ServerResponse, utility: () => string): void {
    if (utilityFault === 'hang') return; // never answers; the socket stays open until closed
    if (utilityFault === 'http_500')
      send(res, 500, engineError('utility failed', 'InternalServerError', 500));
    else if (utilityFault === 'garbage') send(res, 200, '<<<not json>>>');
    else send(res, 200, utility());
  }

  async function generate(req: IncomingMessage, res: ServerResponse, api: Api): Promise<void> {
    const raw = await readBody(req);
    stats.requests++;
    const requestId = req.headers['x-request-id'];
    stats.requestIds.push(typeof requestId === 'string' ? requestId : '');
    const rankHeader = req.headers['x-data-parallel-rank'];
    stats.ranks.push(typeof rankHeader === 'string' ? Number(rankHeader) : null);
    keep(stats.lastHeaders, { ...req.headers });

    let body: GenerationRequest;
    try {
      body = JSON.parse(raw) as GenerationRequest;
    } catch {
      return send(res, 400, engineError('Invalid JSON body', 'BadRequestError', 400));
    }
    keep(stats.lastBodies, body);
    const headerFault = req.headers['x-mock-fault'];
    let faults: Faults;
    try {
      faults = parseFault(typeof headerFault === 'string' ? headerFault : workerFault);
    } catch (err) {
      if (err instanceof FaultSpecError)
        return send(res, 400, engineError(err.message, 'BadRequestError', 400));
      throw err;
    }
    const model = typeof body.model === 'string' ? body.model : '';
    if (!models.includes(model)) {
      return send(res, 404, engineError(`The model \`${model}\` does not exist.`, 'NotFoundError', 404));
    }
    if (rankHeader !== undefined && !(Number(rankHeader) >= 0 && Number(rankHeader) < dpSize)) {
      return send(
        res,
        400,
        engineError(`data_parallel_rank ${String(rankHeader)} is out of range`, 'BadRequestError', 400),
      );
    }

    stats.inflight++;
    let ended = false;
    const timers = new Set<NodeJS.Timeout>();
    const end = (how: 'completed' | 'aborted' | 'cut') => {
      if (ended) return;
      ended = true;
      stats.inflight--;
      if (how === 'completed') stats.completed++;
      else if (how === 'aborted') stats.aborted++;
      for (const t of timers) clearTimeout(t);
    };
    res.on('close', () => {
      if (!res.writableFinished) end('aborted');
    });
    const wait = (ms: number) =>
      new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          timers.delete(t);
          resolve();
        }, ms);
        timers.add(t);
      });

    if (faults.delayHeadersMs) await wait(faults.delayHeadersMs);
    if (ended) return;
    if (faults.status) {
      end('completed');
      const type =
        faults.status === 429
          ? 'RateLimitError'
          : faults.status === 400
            ? 'BadRequestError'
            : 'InternalServerError';
      return send(
        res,
        faults.status,
        engineError(`injected HTTP ${faults.status}`, type, faults.status),
        faults.status === 429 ? { 'retry-after': '1' } : {},
      );
    }

    // What to generate.
    const maxTokens =
      typeof body.max_tokens === 'number'
        ? body.max_tokens
        : typeof body.max_completion_tokens === 'number'
          ? body.max_completion_tokens
          : undefined;
    const count = maxTokens ?? defaultMaxTokens;
    const choices = typeof body.n === 'number' && body.n > 1 ? body.n : 1;
    const stops =
      typeof body.stop === 'string' ? [body.stop] : Array.isArray(body.stop) ? (body.stop as string[]) : [];
    let promptText: string;
    let startAt = 0;
    if (api === 'chat') {
      const messages = Array.isArray(body.messages) ? body.messages : [];
      promptText = messages.map((m) => textOf(m.content)).join(' ');
      const last = messages.at(-1);
      if (
        body.continue_final_message === true &&
        body.add_generation_prompt === false &&
        last?.role === 'assistant'
      ) {
        startAt = tokensAlreadyWritten(textOf(last.content));
      }
    } else {
      promptText = Array.isArray(body.prompt) ? body.prompt.join(' ') : String(body.prompt ?? '');
      startAt = tokensAlreadyWritten(promptText);
    }
    const toolHeader = req.headers['x-mock-tool-call'];
    const toolChoice = body.tool_choice as { function?: { name?: unknown } } | undefined;
    const toolName =
      Array.isArray(body.tools) && body.tools.length > 0
        ? typeof toolHeader === 'string'
          ? toolHeader
          : typeof toolChoice?.function?.name === 'string'
            ? toolChoice.function.name
            : undefined
        : undefined;
    const reasoningHeader = Number(req.headers['x-mock-reasoning'] ?? 0);
    const reasoningTokens =
      api === 'chat' && Number.isInteger(reasoningHeader) && reasoningHeader > 0 ? reasoningHeader : 0;

    // The plan of one choice: its content tokens, its finish reason.
    const plan = (): ChoiceResult => {
      let text = '';
      let finishReason = maxTokens !== undefined ? 'length' : 'stop';
      for (let i = 0; i < count; i++) {
        text += token(startAt + i);
        if (stops.some((s) => s.length > 0 && text.includes(s))) {
          text = text.slice(0, text.indexOf(stops.find((s) => text.includes(s))!));
          finishReason = 'stop';
          break;
        }
      }
      let reasoning = '';
      for (let i = 0; i < reasoningTokens; i++) reasoning += token(i + 7);
      if (toolName) {
        return {
          text: '',
          reasoning,
          toolCall: {
            id: `call_${randomBytes(8).toString('hex')}`,
            name: toolName,
            arguments: TOOL_ARGUMENTS,
          },
          finishReason: 'tool_calls',
        };
      }
      return { text, reasoning, toolCall: undefined, finishReason };
    };
    const results = Array.from({ length: choices }, plan);
    const completionTokens = results.reduce(
      (n, r) => n + countWords(r.text) + countWords(r.reasoning) + (r.toolCall ? 8 : 0),
      0,
    );
    const usage = {
      prompt_tokens: Math.max(1, countWords(promptText)),
      completion_tokens: completionTokens,
      total_tokens: 0,
    };
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    const id = responseId(api);
    const created = Math.floor(Date.now() / 1000);
    const interval = tokensPerSecond > 0 ? 1000 / tokensPerSecond : 0;

    if (body.stream !== true) {
      // Like vLLM: headers only when generation is done.
      if (interval > 0) await wait(interval * count);
      if (ended) return;
      const text = completeBody(api, id, model, created, results, usage);
      if (faults.after?.kind === 'drop_after' || faults.after?.kind === 'reset_after') {
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(text)),
        });
        res.write(text.slice(0, Math.floor(text.length / 2)));
        end('cut');
        res.destroy();
        return;
      }
      end('completed');
      return send(res, 200, text);
    }

    // Streaming: the events of every choice, interleaved step by step.
    const writer = new ChunkWriter(api, id, model, created);
    const events: { text: string; content: boolean }[] = [];
    if (api === 'chat')
      for (let c = 0; c < choices; c++) events.push({ text: writer.role(c), content: false });
    const steps = (r: ChoiceResult): string[][] => {
      const out: string[][] = [];
      const words = (s: string) => s.match(/ [^ ]+/g) ?? (s ? [s] : []);
      for (const w of words(r.reasoning)) out.push([writer.reasoning(0, w)]);
      if (r.toolCall) {
        out.push([writer.toolCallStart(0, r.toolCall.id, r.toolCall.name)]);
        for (let i = 0; i < r.toolCall.arguments.length; i += 4)
          out.push([writer.toolCallArguments(0, r.toolCall.arguments.slice(i, i + 4))]);
      } else {
        for (const w of words(r.text)) out.push([writer.content(0, w)]);
      }
      return out;
    };
    const perChoice = results.map((r, c) => steps(r).map(([e]) => e!.replace('"index":0,', `"index":${c},`)));
    const longest = Math.max(...perChoice.map((p) => p.length));
    for (let s = 0; s < longest; s++) {
      for (const list of perChoice) if (list[s]) events.push({ text: list[s]!, content: true });
    }
    if (!faults.noFinish) {
      results.forEach((r, c) => {
        events.push({ text: writer.finish(c, r.finishReason), content: false });
      });
    }
    if (body.stream_options?.include_usage === true)
      events.push({ text: writer.usage(usage), content: false });

    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    res.flushHeaders();
    if (faults.delayFirstMs) await wait(faults.delayFirstMs);
    let contentWritten = 0;
    for (const event of events) {
      if (ended) return;
      const after = faults.after;
      if (event.content && after && contentWritten === after.n) {
        switch (after.kind) {
          case 'reset_after':
          case 'drop_after':
            end('cut');
            res.destroy();
            return;
          case 'error_frame_after':
            end('completed');
            res.write(
              `data: ${JSON.stringify({ error: { object: 'error', message: 'injected engine failure', type: 'InternalServerError', param: null, code: 500 } })}\n\n`,
            );
            res.end('data: [DONE]\n\n');
            return;
          case 'error_frame_str_after':
            end('completed');
            res.write(
              `data: ${JSON.stringify({ error: { message: 'injected engine failure', type: 'server_error', param: null, code: 'internal_error' } })}\n\n`,
            );
            res.end();
            return;
          case 'event_error_after':
            end('completed');
            res.end('event: error\ndata: {"message":"injected engine failure"}\n\n');
            return;
          case 'stall_after':
            return; // holds the connection; `end('aborted')` runs when the client goes away
          case 'eof_after':
            end('completed');
            res.end();
            return;
          case 'malformed_after':
            res.write('data: {"id":"x","choices":[{"delta":{"content":"oops"\n\n');
            faults.after = undefined;
            break;
        }
      }
      if (!res.write(event.text))
        await new Promise<void>((resolve) => res.once('drain', resolve).once('close', resolve));
      if (event.content) {
        contentWritten++;
        if (interval > 0) await wait(interval);
        else await new Promise<void>((resolve) => setImmediate(resolve));
      }
    }
    if (ended) return;
    end('completed');
    if (faults.noDone) res.end();
    else res.end('data: [DONE]\n\n');
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    port: address.port,
    stats,
    setFault(fault) {
      parseFault(fault);
      workerFault = fault;
    },
    setHealthy(ok) {
      healthy = ok;
    },
    setUtilityFault(fault) {
      utilityFault = fault;
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      });
    },
  };
}
