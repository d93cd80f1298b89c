import { SluiceError } from './base.js';

/** Errors of admin calls fanned out to every engine of a model (STREAMS.md section 1). */

/** An engine could not be reached for a utility call, answered it with an error, or does not support it. */
export class UtilityCallFailed extends SluiceError {
  readonly code = 'utility_call_failed';
  readonly retryable = false;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly method: string,
    readonly callId: string,
    message: string,
  ) {
    super(`Utility call ${method} (${callId}) failed: ${message}`);
  }
}

/** An engine's answer to a utility call does not decode. */
export class UtilityResultDecode extends SluiceError {
  readonly code = 'utility_result_decode';
  readonly retryable = false;
  override readonly status = 502;
  override readonly type = 'server_error' as const;
  constructor(
    readonly method: string,
    readonly callId: string,
    detail: string,
  ) {
    super(`Utility call ${method} (${callId}) returned a result that does not decode: ${detail}`);
  }
}

/** An engine did not answer a utility call in time. */
export class UtilityCallClosed extends SluiceError {
  readonly code = 'utility_call_closed';
  readonly retryable = true;
  override readonly status = 504;
  override readonly type = 'server_error' as const;
  constructor(
    readonly method: string,
    readonly callId: string,
    detail: string,
  ) {
    super(`Utility call ${method} (${callId}) got no answer: ${detail}`);
  }
}

/** The engines of a model answered a utility call with different values. */
export class InconsistentUtilityResults extends SluiceError {
  readonly code = 'inconsistent_utility_results';
  readonly retryable = false;
  override readonly status = 409;
  override readonly type = 'server_error' as const;
  constructor(
    readonly method: string,
    readonly values: Record<string, unknown>,
  ) {
    super(`Workers answered ${method} differently: ${JSON.stringify(values)}`);
  }
  override details(): Record<string, unknown> {
    return { values: this.values };
  }
}
