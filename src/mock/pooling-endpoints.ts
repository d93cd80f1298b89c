import type { IncomingMessage, ServerResponse } from 'node:http';
import { engineError, errorTypeOf } from './bodies.js';
import { FaultSpecError, type Faults, parseFault } from './faults.js';
import { countWords } from './generate.js';
import { header, readBody, send, sendError } from './http-io.js';
import { cutConnection, Life } from './stream.js';
import type { WorkerSettings } from './worker-settings.js';
import type { WorkerState } from './worker-state.js';

/**
 * The endpoints of the mock that generate nothing, shaped like vLLM's: `POST /v1/embeddings`
 * (float or base64, `dimensions`), `/v1/rerank`, `/v2/rerank`, `/rerank`, `/v1/score`, `/score`,
 * `/tokenize`, `/detokenize` (those two with the `tokenizer` option only). Every model of the
 * mock serves them. Vectors and scores are
 * deterministic (a hash of the text), a text counts one token per word. They are counted and
 * kept like generation requests (stats), and take the same faults (`x-mock-fault` or the
 * worker's): the `http_*` statuses, `delay_headers`, `delay_first`, `stall_after` (never
 * answers), `drop_after` (half the body, then the connection is cut); the stream-only faults do
 * nothing here.
 */
export const POOLING_ROUTES: ReadonlySet<string> = new Set([
  'POST /v1/embeddings',
  'POST /v1/rerank',
  'POST /v2/rerank',
  'POST /rerank',
  'POST /v1/score',
  'POST /score',
  'POST /tokenize',
  'POST /detokenize',
]);

/** Dimensions of a mock vector unless the request asks for `dimensions`. */
export const MOCK_DIMENSIONS = 16;

/**
 * The most `dimensions` the mock makes a vector of, and the most numbers one answer holds: a
 * client reaching the mock directly cannot make it build a vector of a billion numbers.
 */
export const MOCK_MAX_DIMENSIONS = 65_536;
export const MOCK_MAX_VALUES = 1 << 21;

class BadRequest extends Error {}

type Body = Record<string, unknown>;

export async function poolingEndpoint(
  route: string,
  req: IncomingMessage,
  res: ServerResponse,
  settings: WorkerSettings,
  state: WorkerState,
): Promise<void> {
  if (!settings.tokenizer && (route === 'POST /tokenize' || route === 'POST /detokenize'))
    return sendError(res, 404, `Not Found: ${route}`);
  const raw = await readBody(req);
  state.received(req);
  let body: Body;
  try {
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
      throw new Error('not an object');
    body = parsed as Body;
  } catch (err) {
    return sendError(res, 400, `Invalid JSON body: ${(err as Error).message}`);
  }
  state.parsedBody(body);
  let faults: Faults;
  try {
    const spec = header(req, 'x-mock-fault');
    faults = spec === undefined ? state.faults : parseFault(spec);
  } catch (err) {
    if (err instanceof FaultSpecError) return sendError(res, 400, `x-mock-fault: ${err.message}`);
    throw err;
  }
  const model = typeof body.model === 'string' ? body.model : '';
  if (!settings.models.includes(model)) return sendError(res, 404, `The model \`${model}\` does not exist.`);
  let answer: string;
  try {
    answer = JSON.stringify(answerOf(route, body, model, settings.maxModelLen));
  } catch (err) {
    if (err instanceof BadRequest) return sendError(res, 400, err.message);
    throw err;
  }
  respond(res, answer, faults, settings, state);
}

/** Sends the answer as the faults say: refused, late, never, or cut halfway. */
function respond(
  res: ServerResponse,
  answer: string,
  faults: Faults,
  settings: WorkerSettings,
  state: WorkerState,
): void {
  const { clock } = settings.pacing;
  state.started();
  const life = new Life(state.ended);
  res.on('close', () => {
    if (!res.writableFinished) life.end('aborted');
  });
  const then = (ms: number, step: () => void) => {
    if (ms > 0) clock.after(ms, () => !life.ended && step());
    else step();
  };
  then(faults.delayHeadersMs, () => {
    if (faults.status !== undefined) {
      life.end('completed');
      const status = faults.status;
      const message = engineError(`injected HTTP ${status} (sluice mock)`, errorTypeOf(status), status);
      return send(res, status, message, status === 429 ? { 'retry-after': '1' } : {});
    }
    if (faults.triggers.some((t) => t.kind === 'stall_after')) return; // a hung engine never answers
    then(faults.delayFirstMs, () => {
      if (faults.triggers.some((t) => t.kind === 'drop_after')) {
        life.end('cut');
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(answer)),
        });
        res.write(answer.slice(0, Math.floor(answer.length / 2)));
        cutConnection(res);
        return;
      }
      life.end('completed');
      send(res, 200, answer);
    });
  });
}

function answerOf(route: string, body: Body, model: string, maxModelLen: number | undefined): object {
  switch (route) {
    case 'POST /v1/embeddings':
      return embeddings(body, model, maxModelLen);
    case 'POST /v1/score':
    case 'POST /score':
      return score(body, model);
    case 'POST /tokenize':
      return tokenize(body, maxModelLen);
    case 'POST /detokenize':
      return detokenize(body);
    default:
      return rerank(body, model);
  }
}

/** FNV-1a of a text: the seed of its vector and scores. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** A unit vector of `dimensions`, the same for the same text. */
export function mockVector(text: string, dimensions: number): number[] {
  let state = hash(text);
  const vector: number[] = [];
  let norm = 0;
  for (let i = 0; i < dimensions; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    const value = state / 2 ** 31 - 1;
    vector.push(value);
    norm += value * value;
  }
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  return vector.map((v) => Math.fround(v * scale));
}

const isTokens = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((t) => Number.isInteger(t) && (t as number) >= 0);

function embeddings(body: Body, model: string, maxModelLen: number | undefined): object {
  const input = body.input;
  const inputs: (string | number[])[] =
    typeof input === 'string' || isTokens(input)
      ? [input]
      : Array.isArray(input) && input.every((i) => typeof i === 'string' || isTokens(i))
        ? (input as (string | number[])[])
        : [];
  if (inputs.length === 0) throw new BadRequest('input must be a string, a list of strings or token ids.');
  const dimensions = body.dimensions ?? MOCK_DIMENSIONS;
  if (!Number.isInteger(dimensions) || (dimensions as number) < 1)
    throw new BadRequest('dimensions must be a positive integer.');
  if ((dimensions as number) > MOCK_MAX_DIMENSIONS)
    throw new BadRequest(
      `dimensions is ${dimensions}: this model's vectors have ${MOCK_MAX_DIMENSIONS} at most.`,
    );
  if (inputs.length * (dimensions as number) > MOCK_MAX_VALUES)
    throw new BadRequest(
      `${inputs.length} inputs of ${dimensions} dimensions: an answer holds ${MOCK_MAX_VALUES} numbers at most.`,
    );
  const base64 = body.encoding_format === 'base64';
  let tokens = 0;
  const data = inputs.map((item, index) => {
    const count = typeof item === 'string' ? Math.max(1, countWords(item)) : item.length;
    if (maxModelLen !== undefined && count > maxModelLen)
      throw new BadRequest(
        `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${count} tokens in the input for embedding generation. Please reduce the length of the input.`,
      );
    tokens += count;
    const vector = mockVector(typeof item === 'string' ? item : item.join(','), dimensions as number);
    const embedding = base64 ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector;
    return { index, object: 'embedding', embedding };
  });
  return {
    id: `embd-${hash(JSON.stringify(inputs)).toString(16)}`,
    object: 'list',
    created: Math.floor(Date.now() / 1000),
    model,
    data,
    usage: { prompt_tokens: tokens, total_tokens: tokens, completion_tokens: 0 },
  };
}

/** How well `document` answers `query`: the share of its words in the query, a hash breaking ties. */
export function mockRelevance(query: string, document: string): number {
  const asked = new Set(query.toLowerCase().split(/\s+/).filter(Boolean));
  const words = document.toLowerCase().split(/\s+/).filter(Boolean);
  const shared = words.filter((w) => asked.has(w)).length;
  const overlap = words.length === 0 ? 0 : shared / words.length;
  return overlap * 0.9 + (hash(`${query}\u0000${document}`) % 1000) / 100_000;
}

function texts(value: unknown, name: string): string[] {
  if (typeof value === 'string') return [value];
  if (Array.isArray(value) && value.every((v) => typeof v === 'string')) return value as string[];
  throw new BadRequest(`${name} must be a string or a list of strings.`);
}

function rerank(body: Body, model: string): object {
  if (typeof body.query !== 'string') throw new BadRequest('query must be a string.');
  const query = body.query;
  if (!Array.isArray(body.documents)) throw new BadRequest('documents must be a list.');
  const documents = body.documents.map((d: unknown) =>
    typeof d === 'string'
      ? d
      : typeof (d as { text?: unknown })?.text === 'string'
        ? (d as { text: string }).text
        : '',
  );
  const topN = typeof body.top_n === 'number' && body.top_n > 0 ? body.top_n : documents.length;
  const withDocuments = body.return_documents !== false;
  const results = documents
    .map((text, index) => ({
      index,
      ...(withDocuments ? { document: { text } } : {}),
      relevance_score: mockRelevance(query, text),
    }))
    .sort((a, b) => b.relevance_score - a.relevance_score)
    .slice(0, topN);
  const tokens = documents.reduce((sum, d) => sum + countWords(query) + countWords(d), 0);
  return { id: `rerank-${hash(query).toString(16)}`, model, usage: { total_tokens: tokens }, results };
}

function score(body: Body, model: string): object {
  const first = texts(body.text_1, 'text_1');
  const second = texts(body.text_2, 'text_2');
  if (first.length !== 1 && first.length !== second.length)
    throw new BadRequest('text_1 must hold one text or as many as text_2.');
  let tokens = 0;
  const data = second.map((text, index) => {
    const query = first.length === 1 ? first[0]! : first[index]!;
    tokens += countWords(query) + countWords(text);
    return { index, object: 'score', score: mockRelevance(query, text) };
  });
  return {
    id: `score-${hash(first.join('\n')).toString(16)}`,
    object: 'list',
    created: Math.floor(Date.now() / 1000),
    model,
    data,
    usage: { prompt_tokens: tokens, total_tokens: tokens, completion_tokens: 0 },
  };
}

/** A word's token id. */
const wordToken = (word: string) => hash(word) % 50_000;

function tokenize(body: Body, maxModelLen: number | undefined): object {
  let text: string;
  if (typeof body.prompt === 'string') text = body.prompt;
  else if (Array.isArray(body.messages))
    text = body.messages
      .map((m: unknown) => {
        const content = (m as { content?: unknown } | null)?.content;
        return typeof content === 'string' ? content : '';
      })
      .join(' ');
  else throw new BadRequest('give either prompt or messages.');
  const tokens = text.split(/\s+/).filter(Boolean).map(wordToken);
  return { count: tokens.length, max_model_len: maxModelLen ?? 4096, tokens };
}

function detokenize(body: Body): object {
  if (!isTokens(body.tokens)) throw new BadRequest('tokens must be a list of token ids.');
  return { prompt: body.tokens.map((t) => `t${t}`).join(' ') };
}
