import { SluiceError } from './base.js';
import { InvalidRequest } from './request-errors.js';
import { StreamError } from './stream-errors.js';

/**
 * The refusals of a Responses request's MCP part (README "MCP tools"), raised before anything is
 * sent. None echoes what an MCP server answered: they say only what failed.
 */

/** More `mcp` tools in one request than `mcp.maxServersPerRequest`. */
export class TooManyMcpServers extends InvalidRequest {
  readonly code = 'too_many_mcp_servers';
  constructor(
    readonly count: number,
    readonly limit: number,
  ) {
    super(
      `The request names ${count} MCP servers; this gateway allows at most ${limit} in one request (mcp.maxServersPerRequest).`,
      'tools',
    );
  }
}

/** An `mcp` tool's server URL matches no pattern of `mcp.allowedServers`. */
export class McpServerNotAllowed extends InvalidRequest {
  readonly code = 'mcp_server_not_allowed';
  constructor(label: string) {
    super(
      `The MCP server URL of '${label}' is not allowed: it is not listed in the gateway's mcp.allowedServers setting (SLUICE_MCP_ALLOWED_SERVERS).`,
      'tools',
    );
  }
}

/**
 * An allowed MCP server URL whose host is, or resolves to, a loopback, link-local, cloud metadata
 * or unspecified address: the gateway connects to those only when the operator names the host.
 */
export class McpServerAddressRefused extends InvalidRequest {
  readonly code = 'mcp_server_address_not_allowed';
  constructor(label: string, kind: string) {
    super(
      `The MCP server URL of '${label}' leads to a ${kind} address, which the gateway connects to only when an mcp.allowedServers pattern names that host itself (not through a '*').`,
      'tools',
    );
  }
}

/**
 * An MCP server could not list its tools: unreachable, too slow, not an MCP server, an HTTP error,
 * or a list past one of the gateway's bounds. `reason` says which, never what the server said.
 */
export class McpListToolsFailed extends SluiceError {
  readonly code = 'mcp_list_tools_failed';
  readonly retryable = false;
  override readonly status = 424;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'tools';
  constructor(label: string, reason: string) {
    super(`Could not list the tools of MCP server '${label}': ${reason}`);
  }
}

/**
 * An `mcp_approval_response` the gateway does not honour: it answers no approval request this
 * gateway made in the previous response chain (`not_found`), its tool is no longer allowed
 * (`tool_not_allowed`), or it was answered already (`already_used`).
 */
export class McpApprovalRefused extends InvalidRequest {
  constructor(
    readonly code:
      | 'mcp_approval_request_not_found'
      | 'mcp_approval_tool_not_allowed'
      | 'mcp_approval_already_used',
    message: string,
  ) {
    super(message, 'input');
  }
}

/**
 * A later turn of an MCP tool loop could not be opened (after the stream started): the response
 * fails with the code of the error that stopped it, relayed (never an HTTP answer of its own).
 */
export class McpTurnFailed extends StreamError {
  readonly retryable = false;
  readonly reason = 'gateway_error' as const;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    /** The code of the error that stopped the turn (`internal_error` for anything else thrown). */
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}
