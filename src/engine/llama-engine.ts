import { randomInt } from 'node:crypto';
import { open } from 'node:fs/promises';
import {
  type ChatHistoryItem,
  type GbnfJsonSchema,
  getLlama,
  JinjaTemplateChatWrapper,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaEmbeddingContext,
  type LlamaGrammar,
  LlamaGrammarEvaluationState,
  LlamaLogLevel,
  type LlamaModel,
  type Token,
  TokenBias,
} from 'node-llama-cpp';
import { SlotPool } from './slot-pool.js';
import { TokenText } from './token-text.js';

/**
 * llama.cpp through node-llama-cpp: one context with a sequence per slot, so concurrent requests
 * are decoded together in shared batches. Binaries are the prebuilt CPU ones; nothing is ever
 * downloaded or compiled.
 */
export interface LlamaEngineOptions {
  modelPath: string;
  /** Concurrent generations (sequences of the context). */
  slots: number;
  /** Tokens per sequence; defaults to the model's training context, at most 4096. */
  contextSize?: number | undefined;
  /**
   * CPU threads per decode. Defaults to 1: ggml's threads wait for each other by spinning, and
   * on a small model or a busy host a second thread costs far more than it brings (measured on
   * the tiny model on a shared 2-core machine: 1600 tokens/s with 1 thread, 40-110 with 2).
   */
  threads?: number | undefined;
}

export interface Sampling {
  maxTokens: number;
  temperature: number;
  topP: number;
  seed?: number | null | undefined;
  stop: readonly string[];
  /** The end-of-sequence token does not end generation (vLLM's `ignore_eos`). */
  ignoreEos?: boolean | undefined;
}

export interface GenerationEnd {
  finishReason: 'stop' | 'length';
  /** The stop string that ended generation, else null (vLLM's `stop_reason`). */
  stopReason: string | null;
  completionTokens: number;
}

export class ModelFileError extends Error {}

/** What the engine's prefix cache did, counted in prompt tokens since it started (vLLM's meaning). */
export interface PrefixCacheCounts {
  /** Prompt tokens looked up in the cache (every prompt token of every generation). */
  queries: number;
  /** Of those, tokens whose KV state was already in the sequence and not evaluated again. */
  hits: number;
}

const GGUF_MAGIC = Buffer.from('GGUF');
/** Grammars built for JSON schemas, kept per schema text (clients repeat the same tools). */
const GRAMMAR_CACHE_SIZE = 64;
/**
 * node-llama-cpp's JSON-schema grammar ends with four newlines and any number more: its chat
 * session stops on them. Here generation drives the sequence itself, so the grammar ends with
 * the JSON value and the only token it then allows is end-of-generation.
 */
const JSON_GRAMMAR_SUFFIX = ' "\\n\\n\\n\\n" [\\n]*';
const DEFAULT_MAX_CONTEXT = 4096;

async function checkGgufFile(path: string): Promise<void> {
  let head: Buffer;
  try {
    const file = await open(path, 'r');
    try {
      head = Buffer.alloc(4);
      await file.read(head, 0, 4, 0);
    } finally {
      await file.close();
    }
  } catch (err) {
    throw new ModelFileError(`cannot read model file ${path}: ${(err as Error).message}`);
  }
  if (!head.equals(GGUF_MAGIC)) throw new ModelFileError(`${path} is not a GGUF file (bad magic)`);
}

/**
 * `sluice.grammar_bias.token_ids` and `.logits`: logit biases a model file asks for while it
 * generates under a grammar (the tiny model has them, see TINY_GRAMMAR_BIAS); none otherwise.
 */
function grammarBiasOf(model: LlamaModel): TokenBias | undefined {
  const meta = model.fileInfo.metadata as {
    sluice?: { grammar_bias?: { token_ids?: unknown; logits?: unknown } };
  };
  const ids = meta.sluice?.grammar_bias?.token_ids;
  const logits = meta.sluice?.grammar_bias?.logits;
  if (!Array.isArray(ids) || !Array.isArray(logits) || ids.length !== logits.length) return undefined;
  const bias = new TokenBias(model.tokenizer);
  ids.forEach((id, i) => {
    if (typeof id === 'number' && typeof logits[i] === 'number') bias.set(id as Token, { logit: logits[i] });
  });
  return bias;
}

export class LlamaEngine {
  private readonly pool: SlotPool<LlamaContextSequence>;
  private readonly chatWrapper: JinjaTemplateChatWrapper | undefined;
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();
  /** The model's own logit biases for generation under a grammar, if its file has some. */
  private readonly grammarBias: TokenBias | undefined;
  /** The sequences held by requests now (acquired, not yet released). */
  private readonly held = new Set<LlamaContextSequence>();
  readonly prefixCache: PrefixCacheCounts = { queries: 0, hits: 0 };
  /** The context that computes embeddings, made on the first request for one. */
  private embedding: Promise<LlamaEmbeddingContext> | undefined;

  private constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    readonly loadMs: number,
    private readonly threads: number,
  ) {
    const sequences = Array.from({ length: context.totalSequences }, () => context.getSequence());
    this.pool = new SlotPool(sequences);
    const template = model.fileInfo.metadata.tokenizer?.chat_template;
    this.chatWrapper =
      typeof template === 'string'
        ? new JinjaTemplateChatWrapper({
            template,
            tokenizer: model.tokenizer,
            joinAdjacentMessagesOfTheSameType: false,
          })
        : undefined;
    this.grammarBias = grammarBiasOf(model);
  }

  static async load(options: LlamaEngineOptions): Promise<LlamaEngine> {
    const started = performance.now();
    await checkGgufFile(options.modelPath);
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    try {
      const model = await llama.loadModel({ modelPath: options.modelPath }).catch((err: unknown) => {
        throw new ModelFileError(`cannot load model ${options.modelPath}: ${(err as Error).message}`);
      });
      const context = await model.createContext({
        sequences: options.slots,
        contextSize: options.contextSize ?? Math.min(model.trainContextSize, DEFAULT_MAX_CONTEXT),
        threads: options.threads ?? 1,
      });
      return new LlamaEngine(llama, model, context, performance.now() - started, options.threads ?? 1);
    } catch (err) {
      await llama.dispose();
      throw err;
    }
  }

  get contextSize(): number {
    return this.context.contextSize;
  }

  get vocabularySize(): number | undefined {
    return this.model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length;
  }

  /** Dimensions of the model's embedding vectors. */
  get embeddingSize(): number {
    return this.model.embeddingVectorSize;
  }

  /**
   * The context embeddings are computed on: llama.cpp's own (`embeddings` on, one sequence, as
   * long as a generation slot's), made on first use so that a chat-only deployment never pays
   * for it. It evaluates one input at a time.
   */
  embeddingContext(): Promise<LlamaEmbeddingContext> {
    this.embedding ??= this.model.createEmbeddingContext({
      contextSize: this.context.contextSize,
      threads: this.threads,
    });
    this.embedding.catch(() => {
      this.embedding = undefined;
    });
    return this.embedding;
  }

  /** A text's tokens as read for an embedding or by the tokenizer endpoint: special-token text stays text. */
  textTokens(text: string): Token[] {
    return this.model.tokenize(text, false);
  }

  detokenize(tokens: readonly Token[]): string {
    return this.model.detokenize(tokens, false);
  }

  get hasChatTemplate(): boolean {
    return this.chatWrapper !== undefined;
  }

  chatTokens(history: ChatHistoryItem[]): Token[] {
    if (!this.chatWrapper) throw new Error('the model has no chat template');
    const { contextText } = this.chatWrapper.generateContextState({ chatHistory: history });
    return this.withBos(contextText.tokenize(this.model.tokenizer));
  }

  /** A completions prompt: special-token text becomes those tokens, as in vLLM. */
  promptTokens(prompt: string | readonly number[]): Token[] {
    if (typeof prompt !== 'string') return [...prompt] as Token[];
    return this.withBos(this.model.tokenize(prompt, true));
  }

  private withBos(tokens: Token[]): Token[] {
    const bos = this.model.tokens.bos;
    if (!this.model.tokens.shouldPrependBosToken || bos === null || tokens[0] === bos) return tokens;
    return [bos, ...tokens];
  }

  /** A grammar that allows exactly the JSON values of a schema, then only end-of-generation. */
  jsonGrammar(schema: GbnfJsonSchema): Promise<LlamaGrammar> {
    const key = JSON.stringify(schema);
    let grammar = this.grammars.get(key);
    if (!grammar) {
      grammar = this.buildJsonGrammar(schema);
      grammar.catch(() => this.grammars.delete(key));
      if (this.grammars.size >= GRAMMAR_CACHE_SIZE) this.grammars.delete(this.grammars.keys().next().value!);
      this.grammars.set(key, grammar);
    }
    return grammar;
  }

  private async buildJsonGrammar(schema: GbnfJsonSchema): Promise<LlamaGrammar> {
    // The generic schema type is too wide for its inferring signature; the value is checked at run time.
    const json = await this.llama.createGrammarForJsonSchema(schema as never);
    const lines = json.grammar.split('\n');
    const root = lines.findIndex((line) => line.startsWith(`${json.rootRuleName} ::= `));
    if (root < 0 || !lines[root]!.endsWith(JSON_GRAMMAR_SUFFIX))
      throw new Error('unexpected JSON grammar from node-llama-cpp: its root rule has changed');
    lines[root] = lines[root]!.slice(0, -JSON_GRAMMAR_SUFFIX.length);
    return this.llama.createGrammar({ grammar: lines.join('\n'), rootRuleName: json.rootRuleName });
  }

  async acquire(signal: AbortSignal): Promise<LlamaContextSequence> {
    const sequence = await this.pool.acquire(signal);
    this.held.add(sequence);
    return sequence;
  }

  release(sequence: LlamaContextSequence): void {
    this.held.delete(sequence);
    this.pool.release(sequence);
  }

  /**
   * Share of the context's KV cells (every sequence's) holding the tokens of the requests being
   * served now, 0..1: vLLM's `kv_cache_usage_perc`, where a cached prefix no request holds is free.
   */
  get kvCacheUsage(): number {
    const cells = this.context.contextSize * this.context.totalSequences;
    let used = 0;
    for (const sequence of this.held) used += sequence.nextTokenIndex;
    return cells > 0 ? Math.min(1, used / cells) : 0;
  }

  /**
   * Generates on a sequence the caller holds. `onText` gets each piece of text as it becomes safe
   * to send; generation waits for it (backpressure). Stops at once when `signal` aborts. With a
   * grammar, only text it allows is generated, and generation ends when it is complete.
   */
  async generate(
    sequence: LlamaContextSequence,
    prompt: readonly Token[],
    sampling: Sampling,
    signal: AbortSignal,
    onText: (text: string) => void | Promise<void>,
    grammar?: LlamaGrammar,
  ): Promise<GenerationEnd> {
    // Keep the part of the sequence's cache that matches the prompt (the last token is always
    // evaluated again: its logits are needed to sample the first new token).
    const cached = prompt.slice(0, -1);
    await sequence.adaptStateToTokens(cached, false);
    const input = prompt.slice(sequence.nextTokenIndex);
    this.prefixCache.queries += prompt.length;
    this.prefixCache.hits += prompt.length - input.length;
    const text = new TokenText(
      (tokens, lastTokens) => this.model.detokenize(tokens, false, lastTokens),
      sampling.stop,
    );
    const end: GenerationEnd = { finishReason: 'length', stopReason: null, completionTokens: 0 };
    if (signal.aborted) return end;
    const tokens = sequence.evaluate(input, {
      temperature: sampling.temperature,
      topP: sampling.topP,
      // node-llama-cpp's default seed is the current time: requests in the same second would match.
      seed: sampling.seed ?? randomInt(2 ** 31),
      yieldEogToken: true,
      grammarEvaluationState: grammar
        ? new LlamaGrammarEvaluationState({ model: this.model, grammar })
        : undefined,
      tokenBias: grammar ? this.grammarBias : undefined,
    });
    for await (const token of tokens) {
      if (signal.aborted) break;
      end.completionTokens++;
      // An ignored end-of-sequence token is generated like any other; as a special token, it
      // shows no text. A grammar, once complete, allows nothing else: that end is never ignored.
      if (this.model.isEogToken(token) && (!sampling.ignoreEos || grammar)) {
        end.finishReason = 'stop';
        break;
      }
      const piece = text.push(token);
      if (piece) await onText(piece);
      if (text.stoppedBy !== undefined) {
        end.finishReason = 'stop';
        end.stopReason = text.stoppedBy;
        break;
      }
      if (end.completionTokens >= sampling.maxTokens || signal.aborted) break;
    }
    const rest = text.flush();
    if (rest && !signal.aborted) await onText(rest);
    return end;
  }

  async close(): Promise<void> {
    this.pool.close();
    await this.llama.dispose();
  }
}
