import { isSluiceError, type SluiceError } from './base.js';
import { InternalError } from './http-errors.js';
import { InvalidBody, InvalidJson, PayloadTooLarge, UnsupportedMediaType } from './request-errors.js';

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
      return new UnsupportedMediaType();
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new InvalidBody('The request body is empty; a JSON object was expected.');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new InvalidJson(`The request body is not valid JSON: ${fastifyError.message}`);
  }
  if (err instanceof SyntaxError || fastifyError.statusCode === 400) {
    return new InvalidJson(`The request body is not valid JSON: ${(err as Error).message}`);
  }
  return new InternalError();
}
