import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Token } from 'node-llama-cpp';
import { z } from 'zod';
import { toChatHistory } from './chat-history.js';
import { readBody, sendJson } from './http-io.js';
import type { LlamaEngine } from './llama-engine.js';
import { errorBody } from './openai-shapes.js';
import { chatRequestSchema, parseRequest, RequestError } from './request-schema.js';
import type { LlamaWorkerStats } from './worker-stats.js';

/**
 * The worker's endpoints that generate nothing, shaped like vLLM's: `POST /v1/embeddings`
 * (llama.cpp computes the vectors on a context of their own; OpenAI's request: a string or
 * strings, token ids, `encoding_format` float or base64, `dimensions`), `POST /tokenize` (a
 * prompt, or chat messages with the model's template) and `POST /detokenize`.
 */
export const POOLING_PATHS: ReadonlySet<string> = new Set(['/v1/embeddings', '/tokenize', '/detokenize']);

const optional = <T extends z.ZodType>(schema: T) => schema.nullable().optional();
const tokenIds = z.array(z.number().int().nonnegative());

const embeddingsSchema = z.looseObject({
  model: z.string(),
  input: z.union([z.string(), z.array(z.string()), tokenIds, z.array(tokenIds)]),
  encoding_format: optional(z.enum(['float', 'base64'])),
  dimensions: optional(z.number().int().positive()),
});

const tokenizeSchema = z.looseObject({
  model: z.string(),
  prompt: z.string().optional(),
  messages: chatRequestSchema.shape.messages.optional(),
  add_generation_prompt: optional(z.boolean()),
});

const detokenizeSchema = z.looseObject({ model: z.string(), tokens: tokenIds });

export interface PoolingContext {
  engine: LlamaEngine;
  modelName: string;
  stats: LlamaWorkerStats;
  /** Aborted when the worker closes. */
  closing: () => boolean;
}

/** Serves one of POOLING_PATHS; errors are vLLM's shape, a client that left stops the work. */
export async function servePooling(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  ctx: PoolingContext,
): Promise<void> {
  const { stats } = ctx;
  stats.requests++;
  const raw = await readBody(req).catch((err: unknown) => {
    stats.aborted++;
    throw err;
  });
  if (ctx.closing()) {
    stats.failed++;
    return sendJson(res, 503, errorBody('The worker is shutting down.', 503));
  }
  const gone = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  stats.inflight++;
  try {
    let body: unknown;
    try {
      body = JSON.parse(raw);
    } catch {
      throw new RequestError('Invalid JSON body.', 400);
    }
    const answer =
      path === '/v1/embeddings'
        ? await embeddings(ctx, body, gone.signal)
        : path === '/tokenize'
          ? tokenize(ctx, body)
          : detokenize(ctx, body);
    if (gone.signal.aborted) {
      stats.aborted++;
      return;
    }
    sendJson(res, 200, JSON.stringify(answer));
    stats.completed++;
  } catch (err) {
    stats.failed++;
    if (!(err instanceof RequestError)) throw err;
    sendJson(res, err.status, errorBody(err.message, err.status, err.detail));
  } finally {
    stats.inflight--;
  }
}

function checkModel(requested: string, served: string): void {
  if (requested !== served) throw new RequestError(`The model \`${requested}\` does not exist.`, 404);
}

function checkVocabulary(engine: LlamaEngine, tokens: readonly number[], param: string): void {
  const vocabulary = engine.vocabularySize;
  if (vocabulary !== undefined && tokens.some((t) => t >= vocabulary))
    throw new RequestError(`Token id out of range: the vocabulary has ${vocabulary} tokens.`, 400, { param });
}

async function embeddings(ctx: PoolingContext, body: unknown, signal: AbortSignal): Promise<object> {
  const { engine } = ctx;
  const request = parseRequest(embeddingsSchema, body);
  checkModel(request.model, ctx.modelName);
  const input = request.input;
  const inputs: (string | number[])[] =
    typeof input === 'string'
      ? [input]
      : input.length > 0 && typeof input[0] === 'number'
        ? [input as number[]]
        : (input as (string | number[])[]);
  if (inputs.length === 0) throw new RequestError('The input is empty.', 400, { param: 'input' });
  const size = engine.embeddingSize;
  const dimensions = request.dimensions ?? size;
  if (dimensions > size)
    throw new RequestError(`dimensions is ${dimensions}: this model's vectors have ${size} at most.`, 400, {
      param: 'dimensions',
    });
  const context = await engine.embeddingContext();
  const tokenized = inputs.map((item, i) => {
    const tokens = typeof item === 'string' ? engine.textTokens(item) : (item as Token[]);
    if (tokens.length === 0) throw new RequestError('An input is empty.', 400, { param: `input[${i}]` });
    if (typeof item !== 'string') checkVocabulary(engine, tokens, 'input');
    return tokens;
  });
  let promptTokens = 0;
  for (const tokens of tokenized) {
    const length = context.calculateInputLength(tokens);
    if (length >= engine.contextSize)
      throw new RequestError(
        `This model's maximum context length is ${engine.contextSize} tokens. However, you requested ${length} tokens in the input for embedding generation. Please reduce the length of the input.`,
        400,
        { param: 'input', code: 'context_length_exceeded' },
      );
    promptTokens += length;
  }
  const base64 = request.encoding_format === 'base64';
  const data: object[] = [];
  for (const [index, tokens] of tokenized.entries()) {
    if (signal.aborted) break;
    const { vector } = await context.getEmbeddingFor(tokens);
    const unit = normalized(vector.slice(0, dimensions));
    const embedding = base64 ? Buffer.from(new Float32Array(unit).buffer).toString('base64') : unit;
    data.push({ index, object: 'embedding', embedding });
  }
  return {
    id: `embd-${Date.now().toString(36)}`,
    object: 'list',
    created: Math.floor(Date.now() / 1000),
    model: ctx.modelName,
    data,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
  };
}

/** The vector scaled to length 1 (as vLLM answers an embedding model's, and OpenAI's are); zeros stay zeros. */
function normalized(vector: readonly number[]): number[] {
  let norm = 0;
  for (const v of vector) norm += v * v;
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  return vector.map((v) => Math.fround(v * scale));
}

function tokenize(ctx: PoolingContext, body: unknown): object {
  const { engine } = ctx;
  const request = parseRequest(tokenizeSchema, body);
  checkModel(request.model, ctx.modelName);
  let tokens: Token[];
  if (request.messages !== undefined) {
    if (!engine.hasChatTemplate) throw new RequestError('The model has no chat template.', 400);
    tokens = engine.chatTokens(
      toChatHistory(request.messages, { addGenerationPrompt: request.add_generation_prompt ?? true }),
    );
  } else if (request.prompt !== undefined) tokens = engine.promptTokens(request.prompt);
  else throw new RequestError('Give either prompt or messages.', 400, { param: 'prompt' });
  return { count: tokens.length, max_model_len: engine.contextSize, tokens };
}

function detokenize(ctx: PoolingContext, body: unknown): object {
  const request = parseRequest(detokenizeSchema, body);
  checkModel(request.model, ctx.modelName);
  checkVocabulary(ctx.engine, request.tokens, 'tokens');
  return { prompt: ctx.engine.detokenize(request.tokens as Token[]) };
}
