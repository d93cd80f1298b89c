import { LRUCache } from 'lru-cache';
import { McpServerNotAllowed, TooManyMcpServers } from '../../errors/mcp-errors.js';
import { InvalidValue } from '../../errors/request-errors.js';
import { McpAllowlist } from '../../mcp/allowlist.js';
import { McpToolCache } from '../../mcp/tool-cache.js';
import type { Logger } from '../../observability/logger.js';
import type { CreateResponseRequest, McpToolRequest } from '../request-schema.js';
import type { InputItem, OutputItem } from '../types.js';
import { mapLimit } from './map-limit.js';
import { allowedBy, listServerTools, resolveTarget } from './servers.js';
import { McpSession } from './session.js';
import type { McpServer, McpSettings } from './types.js';

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
        throw new InvalidValue(
          'An mcp_approval_response needs the mcp tool of its server in `tools`.',
          'input',
        );
      return undefined;
    }
    if (defs.length > this.settings.maxServersPerRequest)
      throw new TooManyMcpServers(defs.length, this.settings.maxServersPerRequest);
    const labels = new Set<string>();
    for (const def of defs) {
      if (labels.has(def.server_label))
        throw new InvalidValue(`Two mcp tools have the server_label '${def.server_label}'.`, 'tools');
      labels.add(def.server_label);
      if (!this.allowlist.allows(def.server_url)) throw new McpServerNotAllowed(def.server_label);
    }
    const concurrency = this.settings.connectConcurrency;
    // Every address first: a refused one fails the request before any server is contacted.
    const targets = await mapLimit(defs, concurrency, (def) =>
      resolveTarget(def, this.allowlist, this.log, signal),
    );
    const servers = await mapLimit(defs, concurrency, async (def, i): Promise<McpServer> => {
      const headers: Record<string, string> = { ...(def.headers ?? {}) };
      if (def.authorization) headers.authorization = `Bearer ${def.authorization}`;
      const target = targets[i]!;
      const key = McpToolCache.key(def.server_url, headers);
      let tools = this.cache.get(key);
      if (!tools) {
        tools = await listServerTools(
          def,
          headers,
          target,
          { settings: this.settings, maxMessageBytes: this.maxMessageBytes, log: this.log },
          signal,
        );
        this.cache.set(key, tools);
      }
      const allowed = def.allowed_tools;
      return {
        label: def.server_label,
        url: def.server_url,
        headers,
        target,
        tools: allowed == null ? tools : tools.filter((tool) => allowedBy(allowed, tool)),
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
}
