import { SluiceError } from './base.js';

/**
 * Requests the gateway cannot take as they are: their body, JSON, URL, media type or a
 * parameter. Never retryable: the same request fails the same way.
 */

/** The base of every 400 (`invalid_request_error`): a request that is wrong as sent; `code` says how. */
export abstract class InvalidRequest extends SluiceError {
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param: string | null;
  constructor(message: string, param: string | null = null) {
    super(message);
    this.param = param;
  }
}

/** A parameter (`param`) has a value the gateway does not accept, or one that contradicts another. */
export class InvalidValue extends InvalidRequest {
  readonly code = 'invalid_value';
}

/** A required parameter (`param`) is missing. */
export class MissingParameter extends InvalidRequest {
  readonly code = 'missing_required_parameter';
}

/** A parameter (`param`) the gateway does not support on this route or transport. */
export class UnsupportedParameter extends InvalidRequest {
  readonly code = 'unsupported_parameter';
  constructor(message: string, param: string) {
    super(message, param);
  }
}

/** The body (or a WebSocket message) is not valid JSON, or is nested deeper than the gateway reads. */
export class InvalidJson extends InvalidRequest {
  readonly code = 'invalid_json';
  constructor(message: string) {
    super(message);
  }
}

/** The body is JSON but not the JSON object a route takes (or it is empty). */
export class InvalidBody extends InvalidRequest {
  readonly code = 'invalid_body';
  constructor(message: string) {
    super(message);
  }
}

/** The request URL has a malformed percent-encoding. */
export class InvalidUrl extends InvalidRequest {
  readonly code = 'invalid_url';
  constructor() {
    super('The request URL is not valid: it has a malformed percent-encoding.');
  }
}

/**
 * A path parameter of the URL is longer than the router reads: 414. Its code is the
 * `invalid_url` of a malformed URL (as released; see docs/ERRORS.md).
 */
export class PathParameterTooLong extends SluiceError {
  readonly code = 'invalid_url';
  readonly retryable = false;
  override readonly status = 414;
  override readonly type = 'invalid_request_error' as const;
  constructor() {
    super('A path parameter of the request URL is too long.');
  }
}

/** A body sent with a Content-Type other than JSON. */
export class UnsupportedMediaType extends SluiceError {
  readonly code = 'unsupported_media_type';
  readonly retryable = false;
  override readonly status = 415;
  override readonly type = 'invalid_request_error' as const;
  constructor() {
    super('Unsupported Content-Type: send the body as application/json.');
  }
}

/**
 * A request body in a content coding the gateway does not decode (`Content-Encoding: gzip`, ...):
 * 415, with `Accept-Encoding: identity` saying what it takes (RFC 9110, section 15.5.16).
 */
export class UnsupportedContentEncoding extends SluiceError {
  readonly code = 'unsupported_content_encoding';
  readonly retryable = false;
  override readonly status = 415;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'content-encoding';
  constructor(encoding: string) {
    super(
      `Content-Encoding '${encoding.slice(0, 64)}' is not supported: send the request body uncompressed (identity).`,
    );
  }
  override headers(): Record<string, string> {
    return { 'accept-encoding': 'identity' };
  }
}

/** A body larger than `server.bodyLimitBytes`. */
export class PayloadTooLarge extends SluiceError {
  readonly code = 'payload_too_large';
  readonly retryable = false;
  override readonly status = 413;
  override readonly type = 'invalid_request_error' as const;
  constructor(readonly limitBytes: number) {
    super(`Request body is larger than the limit of ${limitBytes} bytes.`);
  }
}
