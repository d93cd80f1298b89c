import type { SluiceError } from '../errors/base.js';

/** Anthropic's error types (https://docs.anthropic.com/en/api/errors). */
export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'api_error'
  | 'overloaded_error';

export interface AnthropicErrorBody {
  type: 'error';
  error: { type: AnthropicErrorType; message: string; code: string; [extra: string]: unknown };
  request_id?: string;
}

/** Anthropic answers "overloaded" with 529: sluice does too when no worker can take a request. */
const OVERLOADED_CODES = new Set(['no_worker_available', 'queue_full', 'queue_timeout', 'fleet_saturated']);

/** The Anthropic status of a sluice error: its own, except 529 for a gateway with no room. */
export function anthropicStatus(error: SluiceError): number {
  return anthropicStatusOf(error.code, error.status);
}

/** The Anthropic status of an error code and its OpenAI status (docs/ERRORS.md shows both). */
export function anthropicStatusOf(code: string, status: number): number {
  return OVERLOADED_CODES.has(code) ? 529 : status;
}

export function anthropicErrorType(status: number): AnthropicErrorType {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    default:
      return status >= 400 && status < 500 ? 'invalid_request_error' : 'api_error';
  }
}

/**
 * A sluice error in Anthropic's shape, `{"type":"error","error":{"type","message"}}`, keeping
 * sluice's stable `code` (and the error's other details) as extra fields of `error`.
 */
export function anthropicErrorBody(error: SluiceError, requestId?: string): AnthropicErrorBody {
  const { message: _message, type: _type, param, code: _code, ...details } = error.toBody().error;
  return {
    type: 'error',
    error: {
      type: anthropicErrorType(anthropicStatus(error)),
      message: error.message,
      code: error.code,
      ...(param !== null ? { param } : {}),
      ...details,
    },
    ...(requestId !== undefined ? { request_id: requestId } : {}),
  };
}

/** The `error` event that ends a stream failed after its first byte: `api_error` or, for a 503, `overloaded_error`. */
export function streamErrorBody(error: SluiceError): AnthropicErrorBody {
  const body = anthropicErrorBody(error);
  body.error.type = error.status === 503 ? 'overloaded_error' : 'api_error';
  return body;
}
