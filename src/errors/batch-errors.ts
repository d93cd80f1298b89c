import { SluiceError } from './base.js';

/**
 * Refusals of the embeddings, rerank, score and tokenizer requests, and of a request sent to a
 * model of the wrong kind: 400s in OpenAI's shape, each naming the field at fault.
 */

/**
 * The model does not serve this kind of request: a chat request to an embedding model, a vector
 * request to a chat-only model. What a model serves comes from `models.<m>.kind`, else from what
 * its workers' `/v1/models` declare.
 */
export class WrongModelKind extends SluiceError {
  readonly code = 'wrong_model_kind';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param = 'model';
  constructor(
    readonly model: string,
    readonly needed: string,
    readonly serves: readonly string[],
  ) {
    super(
      `The model '${model}' is ${serves.map(article).join(' and ')} model: it does not serve ${needed} requests. Send this request to a model that does.`,
    );
  }
  override details(): Record<string, unknown> {
    return { model_kinds: this.serves };
  }
}

const ARTICLED: Record<string, string> = { chat: 'a chat', embedding: 'an embedding', rerank: 'a rerank' };

function article(kind: string): string {
  return ARTICLED[kind] ?? `a ${kind}`;
}

/** A batch with nothing in it: an empty `input` (or an empty string or token list in it), no `documents`. */
export class EmptyInput extends SluiceError {
  readonly code = 'empty_input';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param: string;
  constructor(param: string, what: string) {
    super(`Invalid value for '${param}': ${what}.`);
    this.param = param;
  }
}

/** More inputs in one batch than `limits.maxBatchInputs` allows. */
export class TooManyInputs extends SluiceError {
  readonly code = 'too_many_inputs';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param: string;
  constructor(
    param: string,
    readonly given: number,
    readonly limit: number,
  ) {
    super(
      `'${param}' has ${given} items: at most ${limit} are allowed in one request. Send them in several.`,
    );
    this.param = param;
  }
  override details(): Record<string, unknown> {
    return { max_allowed: this.limit };
  }
}

/**
 * An input longer than the model's context (`max_model_len`, as its workers report it). The
 * gateway knows it only of token-id inputs; a text input too long is the engine's to refuse.
 * The code is OpenAI's own for it.
 */
export class InputTooLong extends SluiceError {
  readonly code = 'context_length_exceeded';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param: string;
  constructor(
    param: string,
    readonly tokens: number,
    readonly limit: number,
  ) {
    super(
      `This model's maximum context length is ${limit} tokens, but '${param}' has ${tokens} tokens. Shorten the input.`,
    );
    this.param = param;
  }
  override details(): Record<string, unknown> {
    return { max_allowed: this.limit };
  }
}
