import { StreamError } from './stream-errors.js';

/**
 * One of the gateway's bounds on what it holds of an upstream answer was passed: one SSE event
 * (a line without its end), what is buffered before the first output chunk, or a non-streaming
 * body. The upstream request is aborted; nothing past the bound is kept.
 */
export abstract class UpstreamLimitExceeded extends StreamError {
  abstract readonly what: 'event' | 'preamble' | 'body';
  readonly reason = 'limit_exceeded' as const;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly requestId: string,
    readonly limitBytes: number,
    message: string,
  ) {
    super(message);
  }
  override details(): Record<string, unknown> {
    return { limit_bytes: this.limitBytes };
  }
}

/** One SSE event (a line without its end) past `limits.maxEventBytes`: the engine misbehaves. */
export class UpstreamEventTooLarge extends UpstreamLimitExceeded {
  readonly code = 'upstream_event_too_large';
  readonly retryable = false;
  readonly what = 'event';
  constructor(requestId: string, limitBytes: number) {
    super(
      requestId,
      limitBytes,
      `The engine sent an SSE event larger than ${limitBytes} bytes for request ${requestId}.`,
    );
  }
}

/** More than `limits.maxPrefaceBytes` before the first output chunk: another worker may answer. */
export class UpstreamPreambleTooLarge extends UpstreamLimitExceeded {
  readonly code = 'upstream_preamble_too_large';
  readonly retryable = true;
  readonly what = 'preamble';
  constructor(requestId: string, limitBytes: number) {
    super(
      requestId,
      limitBytes,
      `The engine sent more than ${limitBytes} bytes without any output for request ${requestId}.`,
    );
  }
}

/** A non-streaming answer past `limits.maxBodyBytes`: it would be as large elsewhere. */
export class UpstreamBodyTooLarge extends UpstreamLimitExceeded {
  readonly code = 'upstream_body_too_large';
  readonly retryable = false;
  readonly what = 'body';
  constructor(requestId: string, limitBytes: number) {
    super(
      requestId,
      limitBytes,
      `The engine's answer to request ${requestId} is larger than ${limitBytes} bytes.`,
    );
  }
}

/**
 * The answers every request of the gateway holds together reached `limits.maxHeldBytes`, and this
 * request, holding more than its own floor, needed more: it ends so that the process does not run
 * out of memory. Says nothing of the engine (neutral for its circuit); the same request may succeed
 * later, when less is held.
 */
export class GatewayMemoryFull extends StreamError {
  readonly code = 'gateway_memory_full';
  readonly retryable = false;
  readonly reason = 'limit_exceeded' as const;
  override readonly status = 503;
  override readonly type = 'server_error' as const;
  constructor(
    readonly requestId: string,
    readonly heldBytes: number,
  ) {
    super(
      `The gateway holds too much of the answers in flight to hold more of request ${requestId}'s (${heldBytes} bytes held); try again later.`,
    );
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1' };
  }
  override details(): Record<string, unknown> {
    return { held_bytes: this.heldBytes };
  }
}
