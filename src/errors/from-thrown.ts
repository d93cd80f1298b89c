import { isSluiceError, type SluiceError } from './base.js';
import { InternalError, InvalidRequest, PayloadTooLarge } from './http-errors.js';

/** The parts of a web framework's error that say what went wrong (fastify's `FST_ERR_*`). */
interface FrameworkError {
  code?: string;
  statusCode?: number;
  message?: string;
}

/** Maps anything thrown while serving a request to a typed error with an OpenAI-shaped body. */
export function toSluiceError(err: unknown, bodyLimit: number): SluiceError {
  if (isSluiceError(err)) return err;
  const fastifyError = (err ?? {}) as FrameworkError;
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new PayloadTooLarge(bodyLimit);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new InvalidRequest(
        'Unsupported Content-Type: send the body as application/json.',
        null,
        'unsupported_media_type',
        415,
      );
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new InvalidRequest(
        'The request body is empty; a JSON object was expected.',
        null,
        'invalid_body',
      );
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new InvalidRequest(
        `The request body is not valid JSON: ${fastifyError.message}`,
        null,
        'invalid_json',
      );
  }
  if (err instanceof SyntaxError || fastifyError.statusCode === 400) {
    return new InvalidRequest(
      `The request body is not valid JSON: ${(err as Error).message}`,
      null,
      'invalid_json',
    );
  }
  return new InternalError();
}
