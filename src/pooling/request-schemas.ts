import { z } from 'zod';

/**
 * Request schemas of the endpoints that generate nothing: OpenAI's embeddings, the Cohere/Jina
 * rerank and vLLM's score (what vLLM calls pooling), and vLLM's tokenizer. They check what the
 * gateway relies on and what is plainly wrong; objects stay loose, since engines take extra
 * parameters (vLLM's `truncate_prompt_tokens`, `normalize`, ...) that pass through untouched.
 * An empty batch or too many inputs are told apart by batch-inputs.ts, not here.
 */
const optionalNullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

const tokenIds = z.array(z.number().int().nonnegative());

/**
 * The most `dimensions` an embeddings request may ask for. Real models' vectors have at most a few
 * thousand (OpenAI's text-embedding-3-large 3072, Qwen3-Embedding-8B and NV-Embed-v2 4096), and
 * `dimensions` only shortens them (Matryoshka); 65536 leaves sixteen times that, and bounds what
 * one input's answer can be (about 1.4 MB of JSON numbers) for an engine that would build it.
 */
export const MAX_EMBEDDING_DIMENSIONS = 65_536;

export const embeddingsSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(z.string()), tokenIds, z.array(tokenIds)], {
    error:
      'expected a string, an array of strings, an array of token ids (integers >= 0), or an array of such arrays',
  }),
  encoding_format: optionalNullable(z.enum(['float', 'base64'])),
  dimensions: optionalNullable(
    z
      .number()
      .int()
      .positive()
      .max(MAX_EMBEDDING_DIMENSIONS, {
        error: `at most ${MAX_EMBEDDING_DIMENSIONS}: no embedding model has vectors that long`,
      }),
  ),
  user: optionalNullable(z.string()),
});
export type EmbeddingsRequest = z.output<typeof embeddingsSchema>;

/** A rerank document: its text, or an object with one (Cohere's v1 and Jina's shape). */
const documentSchema = z.union([z.string(), z.looseObject({ text: z.string() })], {
  error: 'expected a string or an object with a text string',
});

/** `POST /v1/rerank`, `/v2/rerank`, `/rerank`: Jina's and Cohere's shape, as vLLM serves it. */
export const rerankSchema = z.looseObject({
  model: z.string().min(1),
  query: z.string(),
  documents: z.array(documentSchema),
  top_n: optionalNullable(z.number().int().nonnegative()),
  return_documents: optionalNullable(z.boolean()),
});
export type RerankRequest = z.output<typeof rerankSchema>;

const scoreText = z.union([z.string(), z.array(z.string())], {
  error: 'expected a string or an array of strings',
});

/** `POST /v1/score`, `/score`: vLLM's, one text scored against one or many (or pairs of texts). */
export const scoreSchema = z.looseObject({
  model: z.string().min(1),
  text_1: scoreText,
  text_2: scoreText,
});
export type ScoreRequest = z.output<typeof scoreSchema>;

/** `POST /tokenize`: vLLM's, of a prompt or of chat messages (with the model's chat template). */
export const tokenizeSchema = z
  .looseObject({
    model: z.string().min(1),
    prompt: z.string().optional(),
    messages: z.array(z.looseObject({ role: z.string().min(1) })).optional(),
    add_special_tokens: optionalNullable(z.boolean()),
  })
  .refine((body) => (body.prompt === undefined) !== (body.messages === undefined), {
    error: 'give either prompt or messages',
    path: ['prompt'],
  });
export type TokenizeRequest = z.output<typeof tokenizeSchema>;

/** `POST /detokenize`: vLLM's. */
export const detokenizeSchema = z.looseObject({
  model: z.string().min(1),
  tokens: tokenIds,
});
export type DetokenizeRequest = z.output<typeof detokenizeSchema>;
