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
