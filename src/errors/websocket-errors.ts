import { SluiceError } from './base.js';

/** Refusals of a WebSocket upgrade, answered over HTTP before the 101. */

/**
 * The upgrade request came from a web page whose origin is not in
 * `responses.websocket.allowedOrigins` (a browser sends `Origin`; a page elsewhere must not reach
 * the gateway with the credentials of the browser's user or network).
 */
export class OriginNotAllowed extends SluiceError {
  readonly code = 'origin_not_allowed';
  readonly retryable = false;
  override readonly status = 403;
  override readonly type = 'permission_error' as const;
  constructor(origin: string) {
    super(
      `WebSocket connections from the origin '${origin.slice(0, 200)}' are not allowed (responses.websocket.allowedOrigins).`,
    );
  }
}

/** One client address holds `responses.websocket.maxConnectionsPerClient` connections already. */
export class TooManyConnections extends SluiceError {
  readonly code = 'too_many_connections';
  readonly retryable = true;
  override readonly status = 429;
  override readonly type = 'rate_limit_error' as const;
  constructor(readonly limit: number) {
    super(`This client has ${limit} WebSocket connections open already: close one before opening another.`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1' };
  }
}

/** The gateway holds `responses.websocket.maxConnections` connections already. */
export class ConnectionCapacityReached extends SluiceError {
  readonly code = 'websocket_capacity_reached';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(readonly limit: number) {
    super(`The gateway holds ${limit} WebSocket connections already: try again shortly.`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1' };
  }
}
