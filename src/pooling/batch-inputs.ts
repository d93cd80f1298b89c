import { EmptyInput, InputTooLong, TooManyInputs } from '../errors/batch-errors.js';
import type { EmbeddingsRequest } from './request-schemas.js';

/** One input of an embeddings batch: a text, or token ids. */
export type EmbeddingInput = string | readonly number[];

/** The inputs of an embeddings request, one per vector it asks for (a single input is a batch of one). */
export function embeddingInputs(input: EmbeddingsRequest['input']): readonly EmbeddingInput[] {
  if (typeof input === 'string') return [input];
  if (input.length === 0) return [];
  // An array of token ids is one input; an array of strings or of token-id arrays is many.
  return typeof input[0] === 'number' ? [input as readonly number[]] : (input as readonly EmbeddingInput[]);
}

/**
 * Refuses a batch that is empty (no input, or an empty string or token list among them) or
 * larger than `maxInputs`, naming the field at fault; and token-id inputs longer than the
 * model's context, when its workers report one (a text's length in tokens is the engine's to
 * know: it refuses a text too long itself).
 */
export function checkEmbeddingInputs(
  inputs: readonly EmbeddingInput[],
  maxInputs: number,
  contextLength: number | undefined,
): void {
  if (inputs.length === 0) throw new EmptyInput('input', 'it holds no input to embed');
  if (inputs.length > maxInputs) throw new TooManyInputs('input', inputs.length, maxInputs);
  const single = inputs.length === 1;
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i]!;
    const param = single ? 'input' : `input[${i}]`;
    if (input.length === 0)
      throw new EmptyInput(
        param,
        typeof input === 'string'
          ? 'an input may not be an empty string'
          : 'an input may not be an empty list of token ids',
      );
    if (contextLength !== undefined && typeof input !== 'string' && input.length > contextLength)
      throw new InputTooLong(param, input.length, contextLength);
  }
}

/** Refuses a batch of `count` items (`param`) that is empty or larger than `maxInputs`. */
export function checkBatchSize(param: string, count: number, maxInputs: number): void {
  if (count === 0) throw new EmptyInput(param, 'it holds nothing');
  if (count > maxInputs) throw new TooManyInputs(param, count, maxInputs);
}
