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
 * the control tokens, so that end-of-turn is rare and generation runs to max_tokens, and the
 * unprintable bytes, so that the gibberish is printable ASCII rather than broken UTF-8.
 */
const BIAS_CHANNEL = 1;
const DAMPED_WEIGHT = -6;

export interface TinyModelOptions {
  seed?: number;
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
  const embeddings = randomTensor('token_embd.weight', [s.embedding, nVocab], 1);
  for (let id = 0; id < nVocab; id++) embeddings.data[id * s.embedding] = BIAS_CHANNEL;
  const output = randomTensor('output.weight', [s.embedding, nVocab], LOGIT_STD / Math.sqrt(s.embedding));
  for (const id of [...vocab.special, ...vocab.unprintable]) {
    fillRow(output, id, 0);
    output.data[id * s.embedding] = DAMPED_WEIGHT;
  }
  // Layers add to the residual stream only through these two; their row 0 stays zero.
  const residualWriter = (t: GgufTensor) => {
    fillRow(t, 0, 0);
    return t;
  };

  const tensors: GgufTensor[] = [embeddings];
  for (let layer = 0; layer < s.layers; layer++) {
    const p = `blk.${layer}`;
    tensors.push(
      ones(`${p}.attn_norm.weight`),
      linear(`${p}.attn_q.weight`, s.embedding, s.embedding),
      linear(`${p}.attn_k.weight`, s.embedding, kvDim),
      linear(`${p}.attn_v.weight`, s.embedding, kvDim),
      residualWriter(linear(`${p}.attn_output.weight`, s.embedding, s.embedding)),
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
    },
    tensors,
  };
}

/** Writes the tiny model; the same seed always gives the same bytes. */
export async function writeTinyModel(
  path: string,
  options: TinyModelOptions = {},
): Promise<{ bytes: number }> {
  const bytes = encodeGguf(buildTinyModel(options));
  await writeFile(path, bytes);
  return { bytes: bytes.length };
}
