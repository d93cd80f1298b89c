import { LRUCache } from 'lru-cache';
import type { SluiceConfig } from '../config/schema.js';
import type { DispatchRequest, OpenedStream } from '../dispatch/dispatcher.js';
import type { ResumableStream } from '../dispatch/resumable-stream.js';
import { isSluiceError } from '../errors/base.js';
import { ClientDisconnected, InvalidRequest } from '../errors/http-errors.js';
import {
  McpApprovalRefused,
  McpListToolsFailed,
  McpServerAddressRefused,
  TooManyMcpServers,
} from '../errors/mcp-errors.js';
import { StreamError } from '../errors/stream-errors.js';
import { type CheckedTarget, resolveServer } from '../mcp/address.js';
import { McpAllowlist } from '../mcp/allowlist.js';
import { describe, type McpCallResult, McpConnection, McpFailure, type McpTool } from '../mcp/client.js';
import { McpToolCache } from '../mcp/tool-cache.js';
import type { Logger } from '../observability/logger.js';
import { newId } from './ids.js';
import { madeByGateway, markMade } from './provenance.js';
import type { CreateResponseRequest, McpToolRequest } from './request-schema.js';
import type { ResponseBuilder, ToolCallRouter } from './response-builder.js';
import type { ResponseRun, RunEnd } from './response-run.js';
import { type ChatMessage, mcpResultText } from './to-chat.js';
import type { InputItem, McpCallItem, McpListToolsItem, OutputItem, ResponseUsage } from './types.js';

/** The `mcp` settings (config `mcp:`). */
export type McpSettings = SluiceConfig['mcp'];

/** The `incomplete_details.reason` of a response whose tool loop reached `mcp.maxTurns`. */
export const MCP_MAX_TURNS = 'mcp_max_turns';

/** What the loop needs from the service: opening an engine stream for a turn. */
export interface LoopHost {
  /** The response's dispatch request (read at each turn: a background run replaces its signal). */
  dispatch(): DispatchRequest;
  open(dispatch: DispatchRequest): Promise<OpenedStream>;
  /** Wraps an opened turn in a (resumable) stream; `body` is the turn's chat body. */
  streamOf(dispatch: DispatchRequest, body: Record<string, unknown>, opened: OpenedStream): ResumableStream;
}

interface Server {
  label: string;
  url: string;
  /** Sent to this server only; never stored, echoed or logged. */
  headers: Record<string, string>;
  /** The address its host resolved to and passed the check: every connection goes there. */
  target: CheckedTarget;
  tools: McpTool[];
  approval: McpToolRequest['require_approval'];
}

type ChatTool = { type: 'function'; function: { name: string; description?: string; parameters: unknown } };

/** The tool definition as the response echoes and stores it: never its headers or authorization. */
export function echoMcpTool(tool: McpToolRequest): Record<string, unknown> {
  const { headers: _headers, authorization: _authorization, ...rest } = tool;
  return {
    ...rest,
    server_description: tool.server_description ?? null,
    allowed_tools: tool.allowed_tools ?? null,
    require_approval: tool.require_approval ?? 'always',
    headers: null,
  };
}

/** Approval ids answered in this process, kept to refuse a replay from another branch of a chain. */
const USED_APPROVALS_KEPT = 10_000;

/**
 * The gateway's side of MCP: the allowlist of servers and the cache of their tool lists. It
 * prepares the MCP part of a response (checks, lists, approved calls) before anything is sent.
 */
export class McpTools {
  private readonly allowlist: McpAllowlist;
  private readonly cache: McpToolCache;
  private readonly usedApprovals = new LRUCache<string, true>({ max: USED_APPROVALS_KEPT });
  /** Most bytes of one message read from a server: a tool result, or a page of a tool list. */
  readonly maxMessageBytes: number;

  constructor(
    readonly settings: McpSettings,
    private readonly log?: Logger | undefined,
  ) {
    this.allowlist = new McpAllowlist(settings.allowedServers);
    this.cache = new McpToolCache(settings.toolCacheMs);
    this.maxMessageBytes =
      Math.max(4 * settings.maxOutputBytes, settings.maxToolsPerServer * settings.maxToolBytes) + 65_536;
  }

  /**
   * The MCP part of a request, or undefined when it names no MCP server. Throws HTTP errors
   * before anything is sent: 400 for too many servers, a server outside `mcp.allowedServers` or
   * at an address it may not lead to, or an approval the gateway does not honour; 424
   * (`mcp_list_tools_failed`) when a server cannot list its tools within the bounds.
   */
  async prepare(
    request: CreateResponseRequest,
    history: readonly (InputItem | OutputItem)[],
    input: readonly InputItem[],
    signal: AbortSignal,
  ): Promise<McpSession | undefined> {
    const defs = (request.tools ?? []).filter((t): t is McpToolRequest => t.type === 'mcp');
    const answers = input.filter((item) => item.type === 'mcp_approval_response');
    if (defs.length === 0) {
      if (answers.length > 0)
        throw new InvalidRequest(
          'An mcp_approval_response needs the mcp tool of its server in `tools`.',
          'input',
          'invalid_value',
        );
      return undefined;
    }
    if (defs.length > this.settings.maxServersPerRequest)
      throw new TooManyMcpServers(defs.length, this.settings.maxServersPerRequest);
    const labels = new Set<string>();
    for (const def of defs) {
      if (labels.has(def.server_label))
        throw new InvalidRequest(
          `Two mcp tools have the server_label '${def.server_label}'.`,
          'tools',
          'invalid_value',
        );
      labels.add(def.server_label);
      if (!this.allowlist.allows(def.server_url))
        throw new InvalidRequest(
          `The MCP server URL of '${def.server_label}' is not allowed: it is not listed in the gateway's mcp.allowedServers setting (SLUICE_MCP_ALLOWED_SERVERS).`,
          'tools',
          'mcp_server_not_allowed',
        );
    }
    const concurrency = this.settings.connectConcurrency;
    // Every address first: a refused one fails the request before any server is contacted.
    const targets = await mapLimit(defs, concurrency, (def) => this.resolve(def, signal));
    const servers = await mapLimit(defs, concurrency, async (def, i): Promise<Server> => {
      const headers: Record<string, string> = { ...(def.headers ?? {}) };
      if (def.authorization) headers.authorization = `Bearer ${def.authorization}`;
      const target = targets[i]!;
      const key = McpToolCache.key(def.server_url, headers);
      let tools = this.cache.get(key);
      if (!tools) {
        tools = await this.list(def, headers, target, signal);
        this.cache.set(key, tools);
      }
      const allowed = def.allowed_tools;
      return {
        label: def.server_label,
        url: def.server_url,
        headers,
        target,
        tools: allowed == null ? tools : tools.filter((tool) => matches(allowed, tool)),
        approval: def.require_approval,
      };
    });
    const maxCalls = Math.min(request.max_tool_calls ?? Number.POSITIVE_INFINITY, this.settings.maxToolCalls);
    const session = new McpSession(
      servers,
      this.settings,
      this.maxMessageBytes,
      this.log,
      maxCalls,
      // Two turns past the calls: the turn that answers, and one to answer a call refused past a bound.
      Math.min(this.settings.maxTurns, maxCalls + 2),
      (request.tools ?? []).filter((t) => t.type === 'function').map((t) => String(t.name)),
    );
    const approvals = session.checkApprovals(answers, history, this.usedApprovals);
    for (const id of approvals.ids) this.usedApprovals.set(id, true);
    await session.answerApprovals(approvals.checked, signal);
    return session;
  }

  /** The checked address of a server's host (400 when it may not lead there, 424 when it does not resolve). */
  private async resolve(def: McpToolRequest, signal: AbortSignal): Promise<CheckedTarget> {
    let resolved: Awaited<ReturnType<typeof resolveServer>>;
    try {
      resolved = await resolveServer(new URL(def.server_url), this.allowlist.namesHostOf(def.server_url));
    } catch (err) {
      if (signal.aborted) throw new ClientDisconnected();
      const code = (err as { code?: unknown }).code;
      throw new McpListToolsFailed(
        def.server_label,
        `its host could not be resolved${typeof code === 'string' ? ` (${code})` : ''}.`,
      );
    }
    if (!resolved.ok) {
      this.log?.warn(
        { serverLabel: def.server_label, origin: originOf(def.server_url), kind: resolved.kind },
        'MCP server URL refused: its address is not allowed',
      );
      throw new McpServerAddressRefused(def.server_label, resolved.kind);
    }
    return resolved.target;
  }

  /** Lists a server's tools within the bounds (`mcp.listTimeoutMs` for all of it); 424 when it cannot. */
  private async list(
    def: McpToolRequest,
    headers: Record<string, string>,
    target: CheckedTarget,
    signal: AbortSignal,
  ): Promise<McpTool[]> {
    const s = this.settings;
    const listing = new AbortController();
    const timer = setTimeout(
      () =>
        listing.abort(
          new McpFailure(
            `did not list its tools within ${s.listTimeoutMs} ms (mcp.listTimeoutMs)`,
            'timeout',
          ),
        ),
      s.listTimeoutMs,
    );
    const bound = AbortSignal.any([signal, listing.signal]);
    let connection: McpConnection | undefined;
    try {
      connection = await McpConnection.open(def.server_url, {
        headers,
        timeoutMs: Math.min(s.callTimeoutMs, s.listTimeoutMs),
        signal: bound,
        target,
        maxMessageBytes: this.maxMessageBytes,
      });
      return await connection.listTools(
        {
          maxPages: s.maxListPages,
          maxTools: s.maxToolsPerServer,
          maxToolBytes: s.maxToolBytes,
          maxSchemaDepth: s.maxToolSchemaDepth,
          pageTimeoutMs: s.callTimeoutMs,
        },
        bound,
      );
    } catch (err) {
      if (signal.aborted) throw new ClientDisconnected();
      const failure =
        listing.signal.reason instanceof McpFailure
          ? listing.signal.reason
          : err instanceof McpFailure
            ? err
            : new McpFailure('did not answer as an MCP server', describe(err));
      // Never the headers; the server by its label and origin only.
      this.log?.warn(
        {
          serverLabel: def.server_label,
          origin: originOf(def.server_url),
          reason: failure.reason,
          detail: failure.detail,
        },
        'MCP server could not list its tools',
      );
      // What failed, never what the server answered.
      throw new McpListToolsFailed(def.server_label, `it ${failure.reason}.`);
    } finally {
      clearTimeout(timer);
      void connection?.close();
    }
  }
}

/**
 * Maps `items` with at most `limit` calls running at once, in order. The first failure is thrown
 * once the calls running have ended, and no call starts after it.
 */
async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed: { err: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        results[i] = await fn(items[i]!, i);
      } catch (err) {
        failed ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failed) throw failed.err;
  return results;
}

/** A URL's origin, for logs (its path and query may carry secrets). */
function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '(invalid)';
  }
}

function matches(filter: NonNullable<McpToolRequest['allowed_tools']>, tool: McpTool): boolean {
  if (Array.isArray(filter)) return filter.includes(tool.name);
  if (filter.tool_names?.includes(tool.name)) return true;
  return filter.read_only === true && tool.annotations?.readOnlyHint === true;
}

/** A function name an engine accepts: [A-Za-z0-9_-], at most 64 characters. */
function functionName(name: string): string {
  return name.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64) || 'tool';
}

interface Approved {
  item: McpCallItem;
  result: McpCallResult;
}

/** An approval answer that passed the checks: the request it answers, and the answer. */
interface CheckedApproval {
  requestId: string;
  label: string;
  name: string;
  args: string;
  engineName: string;
  approve: boolean;
  reason: unknown;
}

/**
 * The MCP part of one response: the servers and their tools, the names the engine knows them
 * by, and the bounds (calls made, engine turns, the deadline). `run` drives the tool loop.
 */
export class McpSession implements ToolCallRouter {
  /** Engine function name → server and tool. */
  private readonly names = new Map<string, { server: Server; tool: McpTool }>();
  private readonly engineNames = new Map<string, string>();
  private readonly listItems: McpListToolsItem[] = [];
  private readonly approved: Approved[] = [];
  /** Chat messages the approvals add after the request's own. */
  readonly messages: ChatMessage[] = [];
  private callsMade = 0;
  /** The engine turn being prepared or run (0: the first). */
  private turn = 0;
  private readonly deadline: number;
  private base: Record<string, unknown> = {};
  private functionTools: unknown[] = [];

  constructor(
    private readonly servers: Server[],
    private readonly settings: McpSettings,
    private readonly maxMessageBytes: number,
    private readonly log: Logger | undefined,
    private readonly maxCalls: number,
    /** Most engine turns of the response: the last one is offered no MCP tool, past it the response is incomplete. */
    private readonly maxTurns: number,
    functionNames: readonly string[],
  ) {
    this.deadline = Date.now() + settings.totalTimeoutMs;
    const taken = new Set(functionNames);
    for (const server of servers) {
      for (const tool of server.tools) {
        let name = functionName(tool.name);
        if (taken.has(name)) name = functionName(`${server.label}__${tool.name}`);
        for (let n = 2; taken.has(name); n++) name = functionName(`${server.label}__${tool.name}_${n}`);
        taken.add(name);
        this.names.set(name, { server, tool });
        this.engineNames.set(`${server.label}\u0000${tool.name}`, name);
      }
      this.listItems.push({
        id: newId('mcpl'),
        type: 'mcp_list_tools',
        status: 'completed',
        server_label: server.label,
        tools: server.tools.map((tool) => ({
          name: tool.name,
          description: tool.description ?? null,
          input_schema: tool.inputSchema,
          annotations: tool.annotations ?? null,
        })),
        error: null,
      });
    }
  }

  route(name: string): { serverLabel: string; toolName: string; approval: boolean } | undefined {
    const found = this.names.get(name);
    if (!found) return undefined;
    return {
      serverLabel: found.server.label,
      toolName: found.tool.name,
      approval: needsApproval(found.server.approval, found.tool.name),
    };
  }

  /**
   * Checks every approval answer before any call is made (400 McpApprovalRefused): it must answer
   * an `mcp_approval_request` the gateway made in the previous response chain (an item of a stored
   * or remembered response's output, never one the client sent), for a tool of a server in
   * `tools` that `allowed_tools` still allows, and not one answered before (in the chain, in this
   * request, or in this process).
   */
  checkApprovals(
    answers: readonly InputItem[],
    history: readonly (InputItem | OutputItem)[],
    used: { has(id: string): boolean },
  ): { checked: CheckedApproval[]; ids: string[] } {
    const checked: CheckedApproval[] = [];
    const ids: string[] = [];
    for (const answer of answers) {
      const requestId = String(answer.approval_request_id);
      const answered =
        ids.includes(requestId) ||
        used.has(requestId) ||
        history.some(
          (item) =>
            (item.type === 'mcp_approval_response' || item.type === 'mcp_call') &&
            (item as { approval_request_id?: unknown }).approval_request_id === requestId,
        );
      if (answered)
        throw new McpApprovalRefused(
          'mcp_approval_already_used',
          `The approval request '${requestId}' was answered already; an approval is used once.`,
        );
      ids.push(requestId);
      const asked = history.find(
        (item) => item.type === 'mcp_approval_request' && item.id === requestId && madeByGateway(item),
      ) as { server_label?: unknown; name?: unknown; arguments?: unknown } | undefined;
      if (!asked)
        throw new McpApprovalRefused(
          'mcp_approval_request_not_found',
          `No mcp_approval_request that this gateway made in the previous response chain has the id '${requestId}' (an approval answers a request found through previous_response_id).`,
        );
      const label = String(asked.server_label);
      const name = String(asked.name);
      const engineName = this.engineNames.get(`${label}\u0000${name}`);
      if (engineName === undefined)
        throw new McpApprovalRefused(
          'mcp_approval_tool_not_allowed',
          `The approval request '${requestId}' is for a tool that this request's mcp tools do not allow (its server_label or allowed_tools).`,
        );
      checked.push({
        requestId,
        label,
        name,
        args: String(asked.arguments ?? ''),
        engineName,
        approve: answer.approve === true,
        reason: answer.reason,
      });
    }
    return { checked, ids };
  }

  /** Makes the calls the client approved (before the first engine turn) and notes the denied ones. */
  async answerApprovals(approvals: readonly CheckedApproval[], signal: AbortSignal): Promise<void> {
    for (const { requestId, label, name, args, engineName, approve, reason } of approvals) {
      this.messages.push({
        role: 'assistant',
        content: null,
        tool_calls: [{ id: requestId, type: 'function', function: { name: engineName, arguments: args } }],
      });
      if (!approve) {
        const why = typeof reason === 'string' && reason ? `: ${reason}` : '.';
        this.messages.push({
          role: 'tool',
          tool_call_id: requestId,
          content: `The user did not approve this tool call${why}`,
        });
        continue;
      }
      const item: McpCallItem = {
        id: newId('mcp'),
        type: 'mcp_call',
        status: 'in_progress',
        server_label: label,
        name,
        arguments: args,
        output: null,
        error: null,
        approval_request_id: requestId,
      };
      const connections = new Map<string, McpConnection>();
      let result: McpCallResult;
      try {
        result = await this.call(item, connections, signal);
      } finally {
        for (const c of connections.values()) void c.close();
      }
      if (signal.aborted) throw new ClientDisconnected();
      this.approved.push({ item, result });
      this.messages.push({ role: 'tool', tool_call_id: requestId, content: mcpResultText(result) });
    }
  }

  /** Adds the MCP tools (within the bounds) to the first turn's chat body, and keeps it for the next turns. */
  decorate(body: Record<string, unknown>): void {
    this.base = body;
    this.functionTools = Array.isArray(body.tools) ? body.tools : [];
    this.setTools(body);
  }

  /** Whether the turn being prepared is offered the MCP tools: within the calls, the time, and before the last turn. */
  private offered(): boolean {
    return this.callsMade < this.maxCalls && Date.now() < this.deadline && this.turn < this.maxTurns - 1;
  }

  private setTools(body: Record<string, unknown>): void {
    const mcp: ChatTool[] = this.offered()
      ? [...this.names].map(([name, { tool }]) => ({
          type: 'function',
          function: {
            name,
            ...(tool.description ? { description: tool.description } : {}),
            parameters: tool.inputSchema ?? { type: 'object', properties: {} },
          },
        }))
      : [];
    const tools = [...this.functionTools, ...mcp];
    if (mcp.length === 0) relaxToolChoice(body, this.functionTools);
    if (tools.length > 0) body.tools = tools;
    else {
      // Past a bound with no function tool of its own: the engine must answer.
      delete body.tools;
      delete body.tool_choice;
      delete body.parallel_tool_calls;
    }
  }

  /** The chat body of the next turn: the conversation so far, MCP tools only within the bounds. */
  private nextBody(messages: ChatMessage[]): Record<string, unknown> {
    this.turn++;
    const body: Record<string, unknown> = { ...this.base, messages };
    this.setTools(body);
    return body;
  }

  /** The tool list items and the approved calls, shown before the first engine turn's events. */
  private prelude(builder: ResponseBuilder): void {
    for (const listed of this.listItems) {
      const shown: McpListToolsItem = { ...listed, status: 'in_progress', tools: [] };
      const index = builder.addItem(shown);
      builder.emit({ type: 'response.mcp_list_tools.in_progress', item_id: shown.id, output_index: index });
      shown.tools = listed.tools;
      shown.status = 'completed';
      builder.emit({ type: 'response.mcp_list_tools.completed', item_id: shown.id, output_index: index });
      builder.emit({ type: 'response.output_item.done', output_index: index, item: shown });
    }
    for (const { item, result } of this.approved) {
      const index = builder.addItem(item);
      builder.emit({ type: 'response.mcp_call.in_progress', item_id: item.id, output_index: index });
      builder.emit({
        type: 'response.mcp_call_arguments.done',
        item_id: item.id,
        output_index: index,
        arguments: item.arguments,
      });
      builder.trackMcpCall(item, index);
      builder.mcpCallDone(item.id, result);
    }
  }

  /** Calls one MCP tool within the bounds; every failure is an error result. */
  private async call(
    item: McpCallItem,
    connections: Map<string, McpConnection>,
    signal: AbortSignal,
  ): Promise<McpCallResult> {
    const found = this.servers.find((s) => s.label === item.server_label);
    if (!found) return { error: `Unknown MCP server '${item.server_label}'.` };
    if (this.callsMade >= this.maxCalls)
      return { error: 'The limit of MCP tool calls for this response was reached; answer without tools.' };
    const remaining = this.deadline - Date.now();
    if (remaining <= 0)
      return { error: 'The time allowed for MCP tool calls in this response is over; answer without tools.' };
    this.callsMade++;
    let args: unknown;
    try {
      args = item.arguments.trim() === '' ? {} : JSON.parse(item.arguments);
    } catch {
      return { error: 'The arguments are not valid JSON.' };
    }
    if (typeof args !== 'object' || args === null || Array.isArray(args))
      return { error: 'The arguments must be a JSON object.' };
    const timeout = Math.min(this.settings.callTimeoutMs, remaining);
    let connection = connections.get(found.label);
    if (!connection) {
      try {
        connection = await McpConnection.open(found.url, {
          headers: found.headers,
          timeoutMs: timeout,
          signal,
          target: found.target,
          maxMessageBytes: this.maxMessageBytes,
        });
      } catch (err) {
        if (err instanceof McpFailure) return { error: `Could not connect: the MCP server ${err.reason}.` };
        return { error: `Could not connect to the MCP server: ${describe(err)}` };
      }
      connections.set(found.label, connection);
    }
    const started = performance.now();
    const result = await connection.call(
      item.name,
      args as Record<string, unknown>,
      timeout,
      this.settings.maxOutputBytes,
      signal,
    );
    this.log?.debug(
      {
        serverLabel: found.label,
        origin: originOf(found.url),
        tool: item.name,
        ok: result.error === undefined,
        ms: Math.round(performance.now() - started),
      },
      'MCP tool call',
    );
    if (result.error !== undefined) {
      // The next call connects again (the server may have dropped the connection).
      connections.delete(found.label);
      void connection.close();
    }
    return result;
  }

  /**
   * The tool loop: follows each engine turn into the same response (one event ladder, one
   * sequence), makes the MCP calls a turn asks for, feeds their results back and opens the next
   * turn, until the engine answers without calling an MCP tool, calls one of the request's own
   * functions, or asks for an approval. An engine failure in any turn ends the whole response;
   * an MCP server failure is an `mcp_call` with `error`, told to the engine. An engine that still
   * calls MCP tools in its last allowed turn (`maxTurns`) ends the response as incomplete
   * (`incomplete_details.reason` "mcp_max_turns"), the calls of that turn not made.
   */
  async run(
    run: ResponseRun,
    first: ResumableStream,
    host: LoopHost,
    messages: ChatMessage[],
  ): Promise<RunEnd> {
    const builder = run.builder;
    builder.toolRouter = this;
    this.prelude(builder);
    const halt = run.haltSignal;
    const connections = new Map<string, McpConnection>();
    let stream = first;
    let usage: ResponseUsage | null = run.response.usage;
    try {
      for (;;) {
        const turnStart = run.response.output.length;
        const before = run.response.usage;
        const end = await run.follow(stream);
        if (run.response.usage !== before && run.response.usage) usage = addUsage(usage, run.response.usage);
        run.response.usage = usage;
        if (end.kind !== 'finished') return end;
        const reason = end.finishReason ?? stream.finishReason;
        const items = run.response.output.slice(turnStart);
        if (
          reason === 'length' ||
          reason === 'content_filter' ||
          !items.some((item) => item.type === 'mcp_call' && item.status === 'in_progress')
        )
          return end;
        const text = items
          .flatMap((item) => (item.type === 'message' ? item.content.map((part) => part.text) : []))
          .join('');
        const calls = builder.endTurn();
        const assistant: ChatMessage = {
          role: 'assistant',
          content: text === '' ? null : text,
          tool_calls: calls.map((call) => ({
            id: call.callId,
            type: 'function' as const,
            function: {
              name:
                call.item.type === 'function_call'
                  ? call.item.name
                  : (this.engineNames.get(`${call.item.server_label}\u0000${call.item.name}`) ??
                    call.item.name),
              arguments: call.item.arguments,
            },
          })),
        };
        // A call of the client's own function, or one waiting for approval, ends the turn and the response.
        const last = calls.some((call) => call.item.type !== 'mcp_call');
        // No turn is left to give the results to: the calls are not made (they end as incomplete).
        if (!last && this.turn + 1 >= this.maxTurns) return { kind: 'incomplete', reason: MCP_MAX_TURNS };
        const results: ChatMessage[] = [];
        for (const call of calls) {
          if (call.item.type !== 'mcp_call') continue;
          if (halt.aborted) break;
          const result = await this.call(call.item, connections, halt);
          // A response ended meanwhile closes the call as incomplete.
          if (halt.aborted) break;
          builder.mcpCallDone(call.item.id, result);
          results.push({ role: 'tool', tool_call_id: call.callId, content: mcpResultText(result) });
        }
        if (halt.aborted) return haltEnd(run);
        if (last) return end;
        messages.push(assistant, ...results);
        const body = this.nextBody(messages);
        const base = host.dispatch();
        const dispatch: DispatchRequest = {
          ...base,
          payload: JSON.stringify(body),
          requestId: `${base.requestId}-mcp${this.turn}`,
          signal: AbortSignal.any([base.signal, halt]),
        };
        let opened: OpenedStream;
        try {
          opened = await host.open(dispatch);
        } catch (err) {
          if (halt.aborted) return haltEnd(run);
          return failedEnd(err);
        }
        stream = host.streamOf(dispatch, body, opened);
        if (halt.aborted) {
          stream.abandon(new ClientDisconnected());
          return haltEnd(run);
        }
      }
    } finally {
      builder.toolRouter = undefined;
      for (const connection of connections.values()) void connection.close();
      // Its approval requests can be answered by a later request (see checkApprovals).
      markMade(run.response.output);
    }
  }
}

/**
 * A `tool_choice` that the MCP tools no longer meet once they are gone: one naming a tool that is
 * no longer offered becomes "none", "required" becomes "auto", so that the engine answers.
 */
function relaxToolChoice(body: Record<string, unknown>, functionTools: readonly unknown[]): void {
  const choice = body.tool_choice;
  if (choice === 'required') body.tool_choice = 'auto';
  else if (typeof choice === 'object' && choice !== null) {
    const name = (choice as { function?: { name?: unknown } }).function?.name;
    const offered = functionTools.some(
      (tool) => (tool as { function?: { name?: unknown } } | null)?.function?.name === name,
    );
    if (!offered) body.tool_choice = 'none';
  }
}

function needsApproval(rule: McpToolRequest['require_approval'], tool: string): boolean {
  if (rule === 'never') return false;
  if (rule == null || rule === 'always') return true;
  if (rule.never?.tool_names?.includes(tool)) return false;
  return true;
}

function addUsage(total: ResponseUsage | null, turn: ResponseUsage): ResponseUsage {
  if (!total) return turn;
  return {
    input_tokens: total.input_tokens + turn.input_tokens,
    input_tokens_details: {
      cached_tokens: total.input_tokens_details.cached_tokens + turn.input_tokens_details.cached_tokens,
    },
    output_tokens: total.output_tokens + turn.output_tokens,
    output_tokens_details: {
      reasoning_tokens:
        total.output_tokens_details.reasoning_tokens + turn.output_tokens_details.reasoning_tokens,
    },
    total_tokens: total.total_tokens + turn.total_tokens,
  };
}

function haltEnd(run: ResponseRun): RunEnd {
  if (run.haltSignal.reason === 'cancelled') return { kind: 'cancelled' };
  const error = new ClientDisconnected();
  return { kind: 'failed', code: error.code, message: error.message, error };
}

/** A later turn could not be opened (after the stream started): the response fails, counted once. */
export class McpTurnFailed extends StreamError {
  readonly retryable = false;
  readonly reason = 'gateway_error' as const;
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function failedEnd(err: unknown): RunEnd {
  const error =
    err instanceof StreamError
      ? err
      : new McpTurnFailed(
          isSluiceError(err) ? err.code : 'internal_error',
          err instanceof Error ? err.message : String(err),
        );
  return { kind: 'failed', code: error.code, message: error.message, error };
}
