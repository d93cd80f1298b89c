import { SluiceError } from './base.js';

/**
 * What a request names does not exist, or belongs to another API key (never told apart: an id
 * another key owns is as unknown as one nobody made). One class per kind of thing.
 */

/** The base of every 404 (`not_found_error`). */
export abstract class NotFound extends SluiceError {
  readonly retryable = false;
  override readonly status = 404;
  override readonly type = 'not_found_error' as const;
  override readonly param: string | null;
  constructor(message: string, param: string | null) {
    super(message);
    this.param = param;
  }
}

/** No worker serves the model the request names. */
export class ModelNotFound extends NotFound {
  readonly code = 'model_not_found';
  constructor(readonly model: string) {
    super(`The model '${model}' does not exist or is not served by any worker.`, 'model');
  }
}

/** No stored response has the id of the URL (`/v1/responses/{response_id}`). */
export class ResponseNotFound extends NotFound {
  readonly code = 'response_not_found';
  constructor(id: string) {
    super(`No response found with id '${id}'.`, 'response_id');
  }
}

/** A request's `previous_response_id` names no stored response (or the gateway stores none). */
export class PreviousResponseNotFound extends NotFound {
  readonly code = 'previous_response_not_found';
  constructor(id: string) {
    super(`No response found with id '${id}'.`, 'previous_response_id');
  }
}

/** No conversation has the id of the URL, or of a request's `conversation`. */
export class ConversationNotFound extends NotFound {
  readonly code = 'conversation_not_found';
  constructor(id: string, param: 'conversation_id' | 'conversation') {
    super(`No conversation found with id '${id}'.`, param);
  }
}

/** The conversation has no item with the id of the URL. */
export class ConversationItemNotFound extends NotFound {
  readonly code = 'item_not_found';
  constructor(conversationId: string, itemId: string) {
    super(`No item '${itemId}' in conversation '${conversationId}'.`, 'item_id');
  }
}

/** No worker has the id of the admin URL. */
export class WorkerNotFound extends NotFound {
  readonly code = 'worker_not_found';
  constructor(id: string) {
    super(`No worker with id '${id}'.`, null);
  }
}

/** No API key has the id of the admin URL. */
export class ApiKeyNotFound extends NotFound {
  readonly code = 'key_not_found';
  constructor(id: string) {
    super(`No API key with id '${id}'.`, 'id');
  }
}

/** No route has this method and URL. */
export class UnknownUrl extends NotFound {
  readonly code = 'unknown_url';
  constructor(method: string, url: string) {
    super(`Unknown request URL: ${method} ${url}`, null);
  }
}
