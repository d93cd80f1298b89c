import type { Worker } from '../workers/worker.js';
import type { CountTokensRequest } from './request-schema.js';
import { systemText, toChatMessagesAll, toChatTools } from './to-chat.js';

/** How a count was made, as said in the `x-sluice-token-count` header. */
export type CountSource = 'tokenizer' | 'estimate';

/** Characters per token of the estimate (a common rule of thumb for English text and code). */
export const CHARS_PER_TOKEN = 4;
/** What one image counts for in the estimate (its size is not known without decoding it). */
export const IMAGE_TOKENS = 1_000;
/** How long the engine's tokenizer may take before the estimate is used instead. */
export const TOKENIZE_TIMEOUT_MS = 1_000;
/** A worker that has no `/tokenize` is not asked again for this long. */
const NO_TOKENIZER_TTL_MS = 5 * 60_000;

/**
 * The estimate: the characters of everything the model would read (system, each message's text,
 * tool calls and results, tool definitions) over CHARS_PER_TOKEN, rounded up, plus IMAGE_TOKENS
 * per image.
 */
export function estimateTokens(request: CountTokensRequest): number {
  let chars = systemText(request.system)?.length ?? 0;
  let images = 0;
  for (const message of request.messages) {
    if (typeof message.content === 'string') {
      chars += message.content.length;
      continue;
    }
    for (const block of message.content) {
      switch (block.type) {
        case 'text':
          chars += block.text.length;
          break;
        case 'image':
          images++;
          break;
        case 'tool_use':
          chars += block.name.length + JSON.stringify(block.input).length;
          break;
        case 'tool_result':
          if (typeof block.content === 'string') chars += block.content.length;
          else
            for (const part of block.content ?? []) {
              if (part.type === 'text') chars += part.text.length;
              else images++;
            }
          break;
        case 'thinking':
        case 'redacted_thinking':
          // not sent back to the engine
          break;
      }
    }
  }
  for (const tool of request.tools ?? []) {
    chars += tool.name.length + (tool.description?.length ?? 0) + JSON.stringify(tool.input_schema).length;
  }
  return Math.ceil(chars / CHARS_PER_TOKEN) + images * IMAGE_TOKENS;
}

/**
 * Asks a worker's tokenizer (vLLM's `POST /tokenize` with chat messages, answering `{count}`)
 * for the prompt's length with its chat template applied. `count` answers undefined when the
 * worker has no such endpoint, fails, or does not answer within the timeout; a worker without
 * the endpoint (404/405) is not asked again for a while.
 */
export class TokenizerClient {
  /** Workers that answered that they have no tokenizer endpoint, until when. */
  private readonly noTokenizer = new Map<string, number>();

  constructor(private readonly timeoutMs = TOKENIZE_TIMEOUT_MS) {}

  async count(worker: Worker, request: CountTokensRequest): Promise<number | undefined> {
    const until = this.noTokenizer.get(worker.id);
    if (until !== undefined && until > Date.now()) return undefined;
    const tools = toChatTools(request);
    const body = JSON.stringify({
      model: request.model,
      messages: toChatMessagesAll(request),
      add_generation_prompt: true,
      ...(tools ? { tools } : {}),
    });
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'application/json',
    };
    if (worker.apiKey) headers.authorization = `Bearer ${worker.apiKey}`;
    try {
      const response = await worker.pool.request({
        method: 'POST',
        path: `${worker.basePath}/tokenize`,
        headers,
        body,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      if (response.statusCode !== 200) {
        await response.body.dump();
        if (response.statusCode === 404 || response.statusCode === 405)
          this.noTokenizer.set(worker.id, Date.now() + NO_TOKENIZER_TTL_MS);
        return undefined;
      }
      const json = (await response.body.json()) as { count?: unknown } | null;
      const count = json?.count;
      return typeof count === 'number' && Number.isInteger(count) && count >= 0 ? count : undefined;
    } catch {
      return undefined;
    }
  }
}
