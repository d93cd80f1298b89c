import { writeFile } from 'node:fs/promises';
import { type GgufFile, type GgufTensor, gguf } from './gguf/types.js';
import { encodeGguf } from './gguf/writer.js';
import { mulberry32 } from './prng.js';
import { buildTinyVocabulary, CHATML_TEMPLATE } from './tiny-tokenizer.js';

/**
 * A tiny llama-architecture model with random weights: the output is gibberish, but llama.cpp
 * runs all of it for real (tokenizer, chat template, attention with RoPE, sampling), so the
 * worker can be tested end to end on a CPU without downloading a model.
 */
export const TINY_MODEL_SHAPE = {
  embedding: 128,
  layers: 2,
  heads: 4,
  kvHeads: 2,
  feedForward: 256,
  contextLength: 2048,
  rmsEps: 1e-5,
  ropeFreqBase: 10000,
} as const;

/** Spread of the logits, so that sampling is neither uniform nor always the same token. */
const LOGIT_STD = 2.5;
/**
 * llama has no output bias, so dimension 0 of the residual stream is made one: every token
 * embedding carries BIAS_CHANNEL there and no layer writes to it, so after the final norm it is
 * always positive. Output rows with a negative weight on it get a logit well below the others:
 * the control tokens, so that they do not turn up in the middle of an answer, and the
 * unprintable bytes, so that the gibberish is printable ASCII rather than broken UTF-8.
 */
const BIAS_CHANNEL = 1;
const DAMPED_WEIGHT = -6;

/**
 * The answer timer: the model ends its chat answers with `<|im_end|>` after some 30-60 tokens,
 * like a chat model, instead of running to max_tokens. Three more residual dimensions are reserved:
 * MARKER is set only in the embedding of `<|im_start|>`; two attention heads of layer 0 (the two
 * query heads of KV head 0) read it. Their keys are non-zero only on `<|im_start|>` tokens and
 * their queries are constant (read from the bias channel), each in one RoPE pair only, so the
 * score of an `<|im_start|>` token at distance d is S·cos(θ·d) and every other token scores 0:
 * - PRESENT (RoPE pair 15, θ ≈ 0.0002: no decay) attends to the `<|im_start|>` tokens whenever
 *   there is one, so it is ~1 in any chat and 0 for a raw completions prompt without one;
 * - RECENT (RoPE pair 7, θ ≈ 0.018) attends to the latest `<|im_start|>` while S·cos(θ·d) beats
 *   the log of the number of other tokens (S ≈ 5, so a soft end), i.e. for some 30-60 tokens
 *   after the assistant turn opened, then drops to 0.
 * The `<|im_end|>` logit is DAMPED + EOS_PRESENT·PRESENT − EOS_RECENT·RECENT: far below the other
 * tokens at the start of an answer, well above them once RECENT has dropped. Completions of text
 * without `<|im_start|>` (PRESENT = 0) still run to max_tokens. Measured, and asserted in tests.
 */
const MARKER_DIM = 1;
const RECENT_DIM = 2;
const PRESENT_DIM = 3;
const RESERVED_DIMS = 4;
const MARKER = 4;
/**
 * Query weight of the timer heads, key weight 6.7: S ≈ q · 6.7 · MARKER / sqrt(head dim), ~30
 * for PRESENT, ~5 for RECENT (lower: a softer end, so that answer lengths spread). Measured with
 * seed 1 on 30 chat prompts at the worker's default sampling (temperature 1, top_p 1, top_k 40):
 * 28-58 tokens, median ~50; seed 7: 33-57.
 */
const KEY_WEIGHT = 6.7;
const PRESENT_QUERY = 6.7;
const RECENT_QUERY = 1.2;
const RECENT_PAIR = 7;
const PRESENT_PAIR = 15;
const EOS_PRESENT = 22;
const EOS_RECENT = 30;
/**
 * Under a JSON grammar (forced tool calls) the model writes JSON, and a string ends only when
 * `"` is sampled, an array only on `]`, a number on a non-digit: with random weights a quote is
 * one token in ~300, so strings would run for hundreds of tokens and numbers overflow. These
 * logit biases, stored in the file's metadata (`sluice.grammar_bias.*`), are applied by the
 * worker only while it generates under a grammar: plain text is unchanged, and a real model,
 * which has no such keys, is never biased.
 */
export const TINY_GRAMMAR_BIAS: Readonly<Record<string, number>> = {
  '"': 7,
  ']': 5,
  '}': 3,
  ',': 1,
  e: -100,
  E: -100,
  ...Object.fromEntries([...'0123456789'].map((digit) => [digit, -4])),
};

export interface TinyModelOptions {
  seed?: number;
  /**
   * Answers never end by themselves (the model of earlier versions): for tests that need a
   * long stream whatever the API (the Responses API has no `ignore_eos`).
   */
  endless?: boolean;
}

export function buildTinyModel(options: TinyModelOptions = {}): GgufFile {
  const random = mulberry32(options.seed ?? 1);
  const s = TINY_MODEL_SHAPE;
  const vocab = buildTinyVocabulary();
  const nVocab = vocab.tokens.length;
  const headDim = s.embedding / s.heads;
  const kvDim = headDim * s.kvHeads;

  // Uniform values with standard deviation `std` (uniform(-1, 1) has std 1/sqrt(3)).
  const randomTensor = (name: string, dims: number[], std: number): GgufTensor => {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
    const scale = std * Math.sqrt(3);
    for (let i = 0; i < data.length; i++) data[i] = (random() * 2 - 1) * scale;
    return { name, type: 'F16', dims, data };
  };
  const ones = (name: string): GgufTensor => ({
    name,
    type: 'F32',
    dims: [s.embedding],
    data: new Float32Array(s.embedding).fill(1),
  });
  // A matrix [in, out] keeps unit-scale inputs at unit scale.
  const linear = (name: string, inputs: number, outputs: number) =>
    randomTensor(name, [inputs, outputs], 1 / Math.sqrt(inputs));

  // Rows are contiguous: row r of a [inputs, outputs] matrix starts at r * inputs.
  const fillRow = (t: GgufTensor, row: number, value: number) => {
    const width = t.dims[0]!;
    t.data.fill(value, row * width, (row + 1) * width);
  };
  // Dimensions 0 to RESERVED_DIMS - 1 of the residual stream carry the bias channel and the
  // answer timer: random weights neither write them nor (for the output) read them.
  const embeddings = randomTensor('token_embd.weight', [s.embedding, nVocab], 1);
  const output = randomTensor('output.weight', [s.embedding, nVocab], LOGIT_STD / Math.sqrt(s.embedding));
  for (let id = 0; id < nVocab; id++) {
    embeddings.data.fill(0, id * s.embedding, id * s.embedding + RESERVED_DIMS);
    embeddings.data[id * s.embedding] = BIAS_CHANNEL;
    output.data.fill(0, id * s.embedding, id * s.embedding + RESERVED_DIMS);
  }
  embeddings.data[vocab.imStart * s.embedding + MARKER_DIM] = MARKER;
  for (const id of [...vocab.special, ...vocab.unprintable]) {
    fillRow(output, id, 0);
    output.data[id * s.embedding] = DAMPED_WEIGHT;
  }
  if (!options.endless) {
    output.data[vocab.eos * s.embedding + PRESENT_DIM] = EOS_PRESENT;
    output.data[vocab.eos * s.embedding + RECENT_DIM] = -EOS_RECENT;
  }
  // Layers add to the residual stream only through these two; their reserved rows stay zero.
  const residualWriter = (t: GgufTensor) => {
    for (let row = 0; row < RESERVED_DIMS; row++) fillRow(t, row, 0);
    return t;
  };

  const tensors: GgufTensor[] = [embeddings];
  for (let layer = 0; layer < s.layers; layer++) {
    const p = `blk.${layer}`;
    const q = linear(`${p}.attn_q.weight`, s.embedding, s.embedding);
    const k = linear(`${p}.attn_k.weight`, s.embedding, kvDim);
    const v = linear(`${p}.attn_v.weight`, s.embedding, kvDim);
    const o = residualWriter(linear(`${p}.attn_output.weight`, s.embedding, s.embedding));
    if (layer === 0) timerHeads({ q, k, v, o, headDim, embedding: s.embedding });
    tensors.push(
      ones(`${p}.attn_norm.weight`),
      q,
      k,
      v,
      o,
      ones(`${p}.ffn_norm.weight`),
      linear(`${p}.ffn_gate.weight`, s.embedding, s.feedForward),
      linear(`${p}.ffn_up.weight`, s.embedding, s.feedForward),
      residualWriter(linear(`${p}.ffn_down.weight`, s.feedForward, s.embedding)),
    );
  }
  tensors.push(ones('output_norm.weight'), output);

  return {
    metadata: {
      'general.architecture': gguf.str('llama'),
      'general.name': gguf.str('sluice-tiny'),
      'general.alignment': gguf.u32(32),
      'general.file_type': gguf.u32(1), // mostly F16
      'llama.vocab_size': gguf.u32(nVocab),
      'llama.context_length': gguf.u32(s.contextLength),
      'llama.embedding_length': gguf.u32(s.embedding),
      'llama.block_count': gguf.u32(s.layers),
      'llama.feed_forward_length': gguf.u32(s.feedForward),
      'llama.attention.head_count': gguf.u32(s.heads),
      'llama.attention.head_count_kv': gguf.u32(s.kvHeads),
      'llama.attention.layer_norm_rms_epsilon': gguf.f32(s.rmsEps),
      'llama.rope.dimension_count': gguf.u32(headDim),
      'llama.rope.freq_base': gguf.f32(s.ropeFreqBase),
      'tokenizer.ggml.model': gguf.str('gpt2'),
      'tokenizer.ggml.pre': gguf.str('default'),
      'tokenizer.ggml.tokens': gguf.strings(vocab.tokens),
      'tokenizer.ggml.token_type': gguf.i32s(vocab.tokenTypes),
      'tokenizer.ggml.merges': gguf.strings(vocab.merges),
      'tokenizer.ggml.bos_token_id': gguf.u32(vocab.bos),
      'tokenizer.ggml.eos_token_id': gguf.u32(vocab.eos),
      'tokenizer.ggml.eot_token_id': gguf.u32(vocab.eot),
      'tokenizer.ggml.padding_token_id': gguf.u32(vocab.pad),
      'tokenizer.ggml.add_bos_token': gguf.bool(false),
      'tokenizer.ggml.add_eos_token': gguf.bool(false),
      'tokenizer.chat_template': gguf.str(CHATML_TEMPLATE),
      // Single-byte tokens: a token's id is its byte.
      'sluice.grammar_bias.token_ids': gguf.i32s(Object.keys(TINY_GRAMMAR_BIAS).map((c) => c.charCodeAt(0))),
      'sluice.grammar_bias.logits': gguf.f32s(Object.values(TINY_GRAMMAR_BIAS)),
    },
    tensors,
  };
}

/**
 * Makes query heads 0 and 1 of a layer (which share KV head 0) the answer timer's RECENT and
 * PRESENT heads; see RECENT_DIM. Row r of an [inputs, outputs] matrix is output r. llama.cpp's
 * llama RoPE rotates the adjacent pairs (2i, 2i+1) of a head by θ_i = base^(-2i/headDim) per
 * position.
 */
function timerHeads(t: {
  q: GgufTensor;
  k: GgufTensor;
  v: GgufTensor;
  o: GgufTensor;
  headDim: number;
  embedding: number;
}): void {
  const { q, k, v, o, headDim, embedding } = t;
  const set = (m: GgufTensor, row: number, column: number, value: number) => {
    m.data[row * m.dims[0]! + column] = value;
  };
  const clearRows = (m: GgufTensor, from: number, to: number) =>
    m.data.fill(0, from * m.dims[0]!, to * m.dims[0]!);
  clearRows(q, 0, 2 * headDim);
  clearRows(k, 0, headDim);
  clearRows(v, 0, headDim);
  // Queries: constant, from the bias channel; keys: the marker, only on <|im_start|>.
  set(q, 2 * RECENT_PAIR, 0, RECENT_QUERY);
  set(q, headDim + 2 * PRESENT_PAIR, 0, PRESENT_QUERY);
  set(k, 2 * RECENT_PAIR, MARKER_DIM, KEY_WEIGHT);
  set(k, 2 * PRESENT_PAIR, MARKER_DIM, KEY_WEIGHT);
  // Values: the marker scaled to ~1 (it is ~MARKER after the norm) in value dimension 0.
  set(v, 0, MARKER_DIM, 1 / MARKER);
  // Output: nothing of heads 0 and 1 reaches the stream but value dimension 0 of each.
  for (let row = 0; row < embedding; row++) o.data.fill(0, row * embedding, row * embedding + 2 * headDim);
  set(o, RECENT_DIM, 0, 1);
  set(o, PRESENT_DIM, headDim, 1);
}

/** The tiny model's file bytes; the same seed always gives the same bytes. */
export function encodeTinyModel(options: TinyModelOptions = {}): Buffer {
  return encodeGguf(buildTinyModel(options));
}

/** Writes the tiny model; the same seed always gives the same bytes. */
export async function writeTinyModel(
  path: string,
  options: TinyModelOptions = {},
): Promise<{ bytes: number }> {
  const bytes = encodeTinyModel(options);
  await writeFile(path, bytes);
  return { bytes: bytes.length };
}
