import { randomInt } from 'node:crypto';
import { open } from 'node:fs/promises';
import {
  type ChatHistoryItem,
  getLlama,
  JinjaTemplateChatWrapper,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  LlamaLogLevel,
  type LlamaModel,
  type Token,
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
}

export interface GenerationEnd {
  finishReason: 'stop' | 'length';
  /** The stop string that ended generation, else null (vLLM's `stop_reason`). */
  stopReason: string | null;
  completionTokens: number;
}

export class ModelFileError extends Error {}

const GGUF_MAGIC = Buffer.from('GGUF');
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

export class LlamaEngine {
  private readonly pool: SlotPool<LlamaContextSequence>;
  private readonly chatWrapper: JinjaTemplateChatWrapper | undefined;

  private constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    readonly loadMs: number,
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
      return new LlamaEngine(llama, model, context, performance.now() - started);
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

  acquire(signal: AbortSignal): Promise<LlamaContextSequence> {
    return this.pool.acquire(signal);
  }

  release(sequence: LlamaContextSequence): void {
    this.pool.release(sequence);
  }

  /**
   * Generates on a sequence the caller holds. `onText` gets each piece of text as it becomes safe
   * to send; generation waits for it (backpressure). Stops at once when `signal` aborts.
   */
  async generate(
    sequence: LlamaContextSequence,
    prompt: readonly Token[],
    sampling: Sampling,
    signal: AbortSignal,
    onText: (text: string) => void | Promise<void>,
  ): Promise<GenerationEnd> {
    // Keep the part of the sequence's cache that matches the prompt (the last token is always
    // evaluated again: its logits are needed to sample the first new token).
    const cached = prompt.slice(0, -1);
    await sequence.adaptStateToTokens(cached, false);
    const input = prompt.slice(sequence.nextTokenIndex);
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
    });
    for await (const token of tokens) {
      if (signal.aborted) break;
      end.completionTokens++;
      if (this.model.isEogToken(token)) {
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
