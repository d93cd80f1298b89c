import { SluiceError } from './base.js';
import { Conflict } from './conflict-errors.js';
import { InvalidRequest } from './request-errors.js';

/**
 * WebSocket mode (`/v1/responses` over a WebSocket): refusals of the upgrade, answered over HTTP
 * before the 101, and of a connection's messages, sent as `error` events on it.
 */

/**
 * The upgrade request came from a web page whose origin is not in
 * `responses.websocket.allowedOrigins`. A browser sends `Origin`; a page elsewhere must not reach
 * the gateway with the credentials of the browser's user or network.
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

/**
 * A WebSocket connection's streams (`stream_id` lanes) are all taken, or one stream's queue of
 * `response.create` messages is full: the client sends it again once one has ended.
 */
export class StreamLimitReached extends SluiceError {
  readonly retryable = true;
  override readonly status = 429;
  override readonly type = 'rate_limit_error' as const;
  override readonly param = 'stream_id';
  constructor(
    message: string,
    readonly code: 'too_many_streams' | 'stream_queue_full',
  ) {
    super(message);
  }
}

/** A `response.create` without a `stream_id` while a response runs on the connection. */
export class ResponseInProgress extends Conflict {
  readonly code = 'response_in_progress';
  constructor() {
    super(
      'A response is already in progress on this connection: wait for its terminal event before sending another response.create (one response at a time per connection), or give each response.create a stream_id to run several.',
    );
  }
}

/** A message that is binary, or JSON but not an object. */
export class InvalidMessage extends InvalidRequest {
  readonly code = 'invalid_message';
}

/** A message whose `type` is not `response.create`. */
export class UnknownEventType extends InvalidRequest {
  readonly code = 'unknown_event_type';
  constructor(eventType: unknown) {
    super(
      `Unknown client event type ${JSON.stringify(eventType ?? null)}: the only one is 'response.create'.`,
      'type',
    );
  }
}

/** A `previous_response_id` naming a response of this connection that failed. */
export class PreviousResponseFailed extends InvalidRequest {
  readonly code = 'previous_response_failed';
  constructor(id: string) {
    super(
      `Response '${id}' failed and cannot be continued: continue from an earlier response or send the whole input.`,
      'previous_response_id',
    );
  }
}

/**
 * The connection reached `responses.websocket.maxConnectionMs`: the last event before the gateway
 * closes it (close code 1001, reason `websocket_connection_limit_reached`).
 */
export class ConnectionTimeLimitReached extends InvalidRequest {
  readonly code = 'websocket_connection_limit_reached';
  constructor(minutes: number) {
    super(
      `This WebSocket connection reached its time limit (${minutes} minutes): open a new connection. Responses stored with store=true can be continued from it with previous_response_id; store=false ones lived only on this connection.`,
    );
  }
}
