import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { type ChoiceResult, completeBody, engineError, errorTypeOf } from './bodies.js';
import { Clock } from './clock.js';
import { FaultSpecError, type Faults, parseFault } from './faults.js';
import {
  Completion,
  continuePrefix,
  continueSuffix,
  countWords,
  FROM_START,
  reasoningText,
  type Start,
  TOOL_ARGUMENT_PIECES,
  TOOL_ARGUMENTS,
} from './generate.js';
import { type Api, ChunkWriter, responseId, toolCallId } from './sse.js';
import { cutConnection, type Ending, Life, MockStream, type Plan } from './stream.js';

export { FAULTS, type FaultName, FaultSpecError, type Faults, parseFault } from './faults.js';
export { sequence, token } from './generate.js';

/**
 * An OpenAI-compatible engine for tests and benchmarks, shaped like vLLM's OpenAI server, with
 * fault injection (see faults.ts) and deterministic output (see generate.ts). Raw node:http and
 * one shared clock (clock.ts): it must never be the bottleneck of a benchmark of the gateway.
 *
 * Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions,
 * POST /flush_cache, POST /reset_prefix_cache, GET /is_sleeping, POST /sleep, POST /wake_up,
 * GET /mock/stats, POST /mock/fault {"fault": "..."}.
 *
 * Request headers it reads: `x-request-id`, `x-data-parallel-rank`, `x-mock-fault: <spec>`,
 * `x-mock-tool-call: <function name>` (with `tools`), `x-mock-reasoning: <N tokens>`,
 * `x-mock-tool-script: <JSON>` (a scripted tool loop, see `scriptStepOf`).
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
}

export interface MockWorkerStats {
  /** Generation requests received (whatever became of them). */
  requests: number;
  inflight: number;
  /** Requests whose client went away before the response ended. */
  aborted: number;
  /** Requests whose response the mock ended itself (injected error ends included; cut connections not). */
  completed: number;
  /** `x-request-id` of each generation request, in order ('' when absent). */
  requestIds: string[];
  /** `x-data-parallel-rank` of each generation request, in order (null when absent). */
  ranks: (number | null)[];
  /** The last 50 parsed generation request bodies. */
  lastBodies: unknown[];
  /** The headers of the last 50 generation requests. */
  lastHeaders: Record<string, string | string[] | undefined>[];
  /** Utility calls received (`POST /flush_cache`, `GET /is_sleeping`, ...), in order. */
  utilityCalls: string[];
}

/** Faults of the utility endpoints (flush_cache, is_sleeping, ...). */
export type UtilityFault = 'http_500' | 'garbage' | 'hang' | undefined;

export interface MockWorker {
  readonly url: string;
  readonly port: number;
  readonly stats: MockWorkerStats;
  /** Sets the worker-wide fault; throws FaultSpecError on an invalid spec. */
  setFault(fault: string | undefined): void;
  /** `GET /health` answers 503 while false. */
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
  messages?: unknown;
  prompt?: unknown;
  stream_options?: unknown;
  tools?: unknown;
  tool_choice?: unknown;
  continue_final_message?: unknown;
  add_generation_prompt?: unknown;
}

class BadRequest extends Error {}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    const text = (part as { text?: unknown } | null)?.text;
    if (typeof text === 'string') out += out ? ` ${text}` : text;
  }
  return out;
}

function send(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(body);
}

function sendError(res: ServerResponse, status: number, message: string): void {
  send(res, status, engineError(message, errorTypeOf(status), status));
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () =>
      resolve(parts.length === 1 ? parts[0]!.toString('utf8') : Buffer.concat(parts).toString('utf8')),
    );
    req.on('error', reject);
  });
}

function keep<T>(list: T[], item: T): void {
  list.push(item);
  if (list.length > KEEP) list.shift();
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return typeof value === 'string' ? value : value?.[0];
}

function positiveInt(
  body: GenerationRequest,
  name: 'max_tokens' | 'max_completion_tokens' | 'n',
): number | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new BadRequest(`${name} must be an integer >= 1, got ${JSON.stringify(value)}.`);
  }
  return value;
}

function stopsOf(stop: unknown): string[] {
  if (typeof stop === 'string') return [stop];
  if (Array.isArray(stop)) return stop.filter((s): s is string => typeof s === 'string');
  return [];
}

/** The function a request asks the mock to call: `x-mock-tool-call`, else a named or required tool_choice. */
function toolNameOf(req: IncomingMessage, body: GenerationRequest): string | undefined {
  if (!Array.isArray(body.tools) || body.tools.length === 0) return undefined;
  const forced = header(req, 'x-mock-tool-call');
  if (forced) return forced;
  const choice = body.tool_choice as { function?: { name?: unknown } } | string | null | undefined;
  if (typeof choice === 'object' && typeof choice?.function?.name === 'string') return choice.function.name;
  if (choice === 'required') {
    const first = (body.tools[0] as { function?: { name?: unknown } } | null)?.function?.name;
    return typeof first === 'string' ? first : undefined;
  }
  return undefined;
}

/** One step of an `x-mock-tool-script`: call `name` with `arguments`, and/or apply `fault`. */
interface ScriptStep {
  name?: string;
  arguments?: unknown;
  fault?: string;
}

/**
 * A scripted tool loop: `x-mock-tool-script` holds a JSON array of steps (or one step). The step
 * used is the number of tool results (`role: "tool"` messages) after the last user message, so
 * step 0 answers the first request, step 1 the request that carries the first tool result, ...
 * A step with `name` calls that function with `arguments` (a JSON value, or a string sent as
 * is) when `tools` offers it, and answers in text otherwise; a step without `name`, or past the
 * end of the script, answers in text. A step's `fault` applies to its request (as `x-mock-fault`),
 * not to a continuation of it (`continue_final_message`, mid-stream resume).
 */
function scriptStepOf(req: IncomingMessage, body: GenerationRequest): ScriptStep | undefined {
  const raw = header(req, 'x-mock-tool-script');
  if (raw === undefined) return undefined;
  let script: unknown;
  try {
    script = JSON.parse(raw);
  } catch {
    throw new BadRequest('x-mock-tool-script is not JSON.');
  }
  const steps = (Array.isArray(script) ? script : [script]) as (ScriptStep | null)[];
  const messages = Array.isArray(body.messages) ? (body.messages as ({ role?: unknown } | null)[]) : [];
  let results = 0;
  for (let i = messages.length - 1; i >= 0 && messages[i]?.role !== 'user'; i--) {
    if (messages[i]?.role === 'tool') results++;
  }
  const step = steps[results];
  return step && typeof step === 'object' ? step : {};
}

function offers(body: GenerationRequest, name: string): boolean {
  return (
    Array.isArray(body.tools) &&
    body.tools.some((t) => (t as { function?: { name?: unknown } } | null)?.function?.name === name)
  );
}

function piecesOf(text: string): string[] {
  return Array.from({ length: Math.max(1, Math.ceil(text.length / 4)) }, (_, i) =>
    text.slice(i * 4, i * 4 + 4),
  );
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
  const defaultMaxTokens = options.defaultMaxTokens ?? 16;
  const dpSize = options.dpSize ?? 1;
  let workerFaultSpec = options.fault;
  let workerFaults = parseFault(workerFaultSpec);
  let healthy = true;
  let sleeping = false;
  let utilityFault: UtilityFault;
  const clock = new Clock();
  const pacing = { clock, intervalMs, eventsPerWrite };
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
    utilityCalls: [],
  };
  const onEnd = (how: Ending): void => {
    stats.inflight--;
    if (how === 'completed') stats.completed++;
    else if (how === 'aborted') stats.aborted++;
  };

  const setFault = (spec: string | undefined): void => {
    workerFaults = parseFault(spec);
    workerFaultSpec = spec;
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
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

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const route = `${req.method} ${q < 0 ? url : url.slice(0, q)}`;
    switch (route) {
      case 'POST /v1/chat/completions':
        return generate(req, res, 'chat');
      case 'POST /v1/completions':
        return generate(req, res, 'completions');
      case 'GET /health':
        // vLLM answers an empty 200.
        if (healthy) return void res.writeHead(200, { 'content-length': '0' }).end();
        return sendError(res, 503, 'unhealthy (sluice mock)');
      case 'GET /v1/models': {
        const created = Math.floor(Date.now() / 1000);
        const maxModelLen = options.maxModelLen;
        const data = models.map((id) => ({
          id,
          object: 'model',
          created,
          owned_by: 'sluice-mock',
          ...(maxModelLen === undefined ? {} : { max_model_len: maxModelLen }),
        }));
        return send(res, 200, JSON.stringify({ object: 'list', data }));
      }
      case 'GET /mock/stats':
        return send(res, 200, JSON.stringify(stats));
      case 'POST /mock/fault': {
        let fault: unknown;
        try {
          fault = (JSON.parse((await readBody(req)) || '{}') as { fault?: unknown } | null)?.fault;
        } catch {
          return sendError(res, 400, 'the body is not JSON; expected {"fault": "<spec>"}');
        }
        if (fault !== undefined && fault !== null && typeof fault !== 'string') {
          return sendError(res, 400, '`fault` must be a string or null');
        }
        try {
          setFault(fault ?? undefined);
        } catch (err) {
          return sendError(res, 400, (err as Error).message);
        }
        return send(res, 200, JSON.stringify({ fault: workerFaultSpec ?? null }));
      }
      case 'POST /flush_cache':
      case 'POST /reset_prefix_cache':
        return utility(route, res, () => '{}');
      case 'GET /is_sleeping':
        return utility(route, res, () => JSON.stringify({ is_sleeping: sleeping }));
      case 'POST /sleep':
        return utility(route, res, () => {
          sleeping = true;
          return '{}';
        });
      case 'POST /wake_up':
        return utility(route, res, () => {
          sleeping = false;
          return '{}';
        });
      default:
        return sendError(res, 404, `Not Found: ${route}`);
    }
  }

  function utility(route: string, res: ServerResponse, answer: () => string): void {
    stats.utilityCalls.push(route);
    if (utilityFault === 'hang') return; // never answers; the socket stays open until closed
    if (utilityFault === 'http_500') sendError(res, 500, 'utility call failed (sluice mock)');
    else if (utilityFault === 'garbage') send(res, 200, '<<<not json>>>');
    else send(res, 200, answer());
  }

  async function generate(req: IncomingMessage, res: ServerResponse, api: Api): Promise<void> {
    const raw = await readBody(req);
    stats.requests++;
    stats.requestIds.push(header(req, 'x-request-id') ?? '');
    const rankHeader = header(req, 'x-data-parallel-rank');
    stats.ranks.push(rankHeader === undefined ? null : Number(rankHeader));
    keep(stats.lastHeaders, { ...req.headers });

    let body: GenerationRequest;
    try {
      const parsed: unknown = JSON.parse(raw);
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
        throw new Error('not an object');
      body = parsed as GenerationRequest;
    } catch (err) {
      return sendError(res, 400, `Invalid JSON body: ${(err as Error).message}`);
    }
    keep(stats.lastBodies, body);

    let step: ScriptStep | undefined;
    try {
      step = scriptStepOf(req, body);
    } catch (err) {
      if (err instanceof BadRequest) return sendError(res, 400, err.message);
      throw err;
    }
    // A step's fault is for its own request, not for the continuation that resumes it.
    const stepFault =
      typeof step?.fault === 'string' && body.continue_final_message !== true ? step.fault : undefined;
    const faultHeader = stepFault ?? header(req, 'x-mock-fault');
    let faults: Faults;
    try {
      faults = faultHeader === undefined ? workerFaults : parseFault(faultHeader);
    } catch (err) {
      if (err instanceof FaultSpecError) return sendError(res, 400, `x-mock-fault: ${err.message}`);
      throw err;
    }
    const model = typeof body.model === 'string' ? body.model : '';
    if (!models.includes(model)) return sendError(res, 404, `The model \`${model}\` does not exist.`);
    if (rankHeader !== undefined) {
      const rank = Number(rankHeader);
      if (!Number.isInteger(rank) || rank < 0 || rank >= dpSize) {
        return sendError(res, 400, `data_parallel_rank ${rankHeader} is out of range [0, ${dpSize}).`);
      }
    }
    let plan: Plan;
    try {
      plan = planOf(req, body, api, step);
    } catch (err) {
      if (err instanceof BadRequest) return sendError(res, 400, err.message);
      throw err;
    }

    stats.inflight++;
    const life = new Life(onEnd);
    res.on('close', () => {
      if (!res.writableFinished) life.end('aborted');
    });
    const then = (ms: number, step: () => void) => {
      if (ms > 0) clock.after(ms, () => !life.ended && step());
      else step();
    };

    then(faults.delayHeadersMs, () => {
      if (faults.status !== undefined) {
        life.end('completed');
        const status = faults.status;
        const headers: Record<string, string> = status === 429 ? { 'retry-after': '1' } : {};
        return send(
          res,
          status,
          engineError(`injected HTTP ${status} (sluice mock)`, errorTypeOf(status), status),
          headers,
        );
      }
      const id = responseId(api);
      const created = Math.floor(Date.now() / 1000);
      if (body.stream === true) {
        const writer = new ChunkWriter(api, id, model, created, plan.choices);
        return new MockStream(res, life, pacing, writer, plan, faults).start();
      }
      if (faults.triggers.some((t) => t.kind === 'stall_after')) return; // a hung engine never answers
      // Like vLLM, a non-streaming answer comes when generation is done.
      const tokens = plan.usage.completion_tokens / plan.choices;
      then(faults.delayFirstMs + intervalMs * tokens, () => {
        const text = completeBody(api, id, model, created, resultsOf(plan), plan.usage);
        if (faults.triggers.some((t) => t.kind === 'drop_after')) {
          life.end('cut');
          res.writeHead(200, {
            'content-type': 'application/json',
            'content-length': String(Buffer.byteLength(text)),
          });
          res.write(text.slice(0, Math.floor(text.length / 2)));
          cutConnection(res);
          return;
        }
        life.end('completed');
        send(res, 200, text);
      });
    });
  }

  function planOf(req: IncomingMessage, body: GenerationRequest, api: Api, step?: ScriptStep): Plan {
    const maxTokens = positiveInt(body, 'max_tokens') ?? positiveInt(body, 'max_completion_tokens');
    const choices = positiveInt(body, 'n') ?? 1;
    let promptText: string;
    let start: Start = FROM_START;
    if (api === 'chat') {
      if (body.messages !== undefined && !Array.isArray(body.messages))
        throw new BadRequest('messages must be a list.');
      const messages = (body.messages ?? []) as ({ role?: unknown; content?: unknown } | null)[];
      promptText = messages.map((m) => textOf(m?.content)).join(' ');
      const last = messages.at(-1);
      if (
        body.continue_final_message === true &&
        body.add_generation_prompt === false &&
        last?.role === 'assistant'
      ) {
        start = continuePrefix(textOf(last.content)) ?? FROM_START;
      }
    } else {
      const prompt = body.prompt;
      promptText = Array.isArray(prompt)
        ? prompt.map((p) => (Array.isArray(p) ? p.join(' ') : String(p))).join(' ')
        : typeof prompt === 'string'
          ? prompt
          : '';
      if (typeof prompt === 'string') start = continueSuffix(prompt) ?? FROM_START;
    }
    const completion = new Completion(start, maxTokens, defaultMaxTokens, stopsOf(body.stop));
    let toolName = api === 'chat' && step === undefined ? toolNameOf(req, body) : undefined;
    let argumentPieces: string[] | undefined;
    if (api === 'chat' && step?.name !== undefined && offers(body, step.name)) {
      toolName = step.name;
      const args = step.arguments === undefined ? {} : step.arguments;
      argumentPieces = piecesOf(typeof args === 'string' ? args : JSON.stringify(args));
    }
    const reasoningHeader = Number(header(req, 'x-mock-reasoning') ?? 0);
    const reasoningTokens =
      api === 'chat' && Number.isInteger(reasoningHeader) && reasoningHeader > 0 ? reasoningHeader : 0;
    const perChoice =
      reasoningTokens +
      (toolName ? 1 + (argumentPieces ?? TOOL_ARGUMENT_PIECES).length : completion.generated);
    const promptTokens = countWords(promptText);
    const completionTokens = perChoice * choices;
    const streamOptions = body.stream_options as { include_usage?: unknown } | null | undefined;
    return {
      choices,
      completion,
      reasoningTokens,
      tool: toolName
        ? { name: toolName, callIds: Array.from({ length: choices }, toolCallId), argumentPieces }
        : undefined,
      usage: {
        prompt_tokens: promptTokens,
        completion_tokens: completionTokens,
        total_tokens: promptTokens + completionTokens,
      },
      includeUsage: streamOptions?.include_usage === true,
    };
  }

  function resultsOf(plan: Plan): ChoiceResult[] {
    const text = plan.tool ? '' : plan.completion.text();
    const reasoning = reasoningText(plan.reasoningTokens);
    return Array.from({ length: plan.choices }, (_, c) => ({
      text,
      reasoning,
      toolCall: plan.tool
        ? {
            id: plan.tool.callIds[c]!,
            name: plan.tool.name,
            arguments: plan.tool.argumentPieces ? plan.tool.argumentPieces.join('') : TOOL_ARGUMENTS,
          }
        : undefined,
      finishReason: plan.tool ? 'tool_calls' : plan.completion.finishReason,
    }));
  }

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
    stats,
    setFault,
    setHealthy(ok) {
      healthy = ok;
    },
    setUtilityFault(fault) {
      utilityFault = fault;
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
