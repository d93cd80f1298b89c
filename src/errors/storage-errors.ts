import type { OpenAIErrorType } from './base.js';
import { SluiceError } from './base.js';

/**
 * A storage backend failed (connection lost, constraint broken, disk full). A retryable one
 * (the backend is unavailable or busy for now) is a 503, anything else a 500.
 */
export class StoreError extends SluiceError {
  readonly code: string;
  readonly retryable: boolean;
  override readonly status: number;
  override readonly type: OpenAIErrorType;
  constructor(message: string, code = 'store_error', retryable = false, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.retryable = retryable;
    this.status = retryable ? 503 : 500;
    this.type = retryable ? 'service_unavailable_error' : 'server_error';
  }
  override headers(): Record<string, string> {
    return this.retryable ? { 'retry-after': '1' } : {};
  }
}

/** A response's conversation was deleted before the response could be appended to it. */
export class ConversationGone extends StoreError {
  constructor(readonly conversationId: string) {
    super(`The conversation '${conversationId}' no longer exists.`, 'store_conversation_gone', false);
  }
}
