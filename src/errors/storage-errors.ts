import { SluiceError } from './base.js';

/** A storage backend failed (connection lost, constraint broken, disk full). */
export class StoreError extends SluiceError {
  readonly code: string;
  readonly retryable: boolean;
  override readonly status = 500;
  constructor(message: string, code = 'store_error', retryable = false, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.retryable = retryable;
  }
}

/** A response's conversation was deleted before the response could be appended to it. */
export class ConversationGone extends StoreError {
  constructor(readonly conversationId: string) {
    super(`The conversation '${conversationId}' no longer exists.`, 'store_conversation_gone', false);
  }
}
