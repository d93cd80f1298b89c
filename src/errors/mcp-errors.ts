import { SluiceError } from './base.js';

/**
 * The refusals of a Responses request's MCP part (README "MCP tools"), raised before anything is
 * sent. None echoes what an MCP server answered: they say only what failed.
 */

/** More `mcp` tools in one request than `mcp.maxServersPerRequest`. */
export class TooManyMcpServers extends SluiceError {
  readonly code = 'too_many_mcp_servers';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'tools';
  constructor(
    readonly count: number,
    readonly limit: number,
  ) {
    super(
      `The request names ${count} MCP servers; this gateway allows at most ${limit} in one request (mcp.maxServersPerRequest).`,
    );
  }
}

/**
 * An allowed MCP server URL whose host is, or resolves to, an address the gateway never connects
 * to unless the operator names it (loopback, link-local, the cloud metadata address, unspecified).
 */
export class McpServerAddressRefused extends SluiceError {
  readonly code = 'mcp_server_address_not_allowed';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'tools';
  constructor(label: string, kind: string) {
    super(
      `The MCP server URL of '${label}' leads to a ${kind} address, which the gateway connects to only when an mcp.allowedServers pattern names that host itself (not through a '*').`,
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
export class McpApprovalRefused extends SluiceError {
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'input';
  constructor(
    readonly code:
      | 'mcp_approval_request_not_found'
      | 'mcp_approval_tool_not_allowed'
      | 'mcp_approval_already_used',
    message: string,
  ) {
    super(message);
  }
}
