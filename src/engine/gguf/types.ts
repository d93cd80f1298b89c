/**
 * The GGUF v3 format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), little-endian:
 *
 *   header        u32 magic "GGUF" (0x46554747), u32 version 3, u64 tensor count, u64 key-value count
 *   key-values    per entry: string key, u32 value type, value
 *                 (a string is u64 byte length + UTF-8 bytes; an array is u32 item type, u64 count,
 *                 items; arrays of strings are allowed, arrays of arrays are not needed here)
 *   tensor infos  per tensor: string name, u32 dimension count, u64 per dimension (innermost,
 *                 i.e. the contiguous one, first), u32 ggml type, u64 offset of its data from the
 *                 start of the data section (a multiple of the alignment)
 *   padding       zero bytes up to a multiple of `general.alignment` (u32, 32 when absent)
 *   tensor data   each tensor's bytes, each padded to the alignment
 */
export const GGUF_MAGIC = 0x46554747;
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;

export const GGUF_VALUE_TYPE = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const;

export type GgufScalarType = Exclude<keyof typeof GGUF_VALUE_TYPE, 'array'>;
type NumberType = Exclude<GgufScalarType, 'bool' | 'string' | 'uint64' | 'int64'>;
export type GgufScalar = number | bigint | boolean | string;

export type GgufValue =
  | { type: NumberType; value: number }
  | { type: 'uint64' | 'int64'; value: number | bigint }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'array'; itemType: GgufScalarType; values: readonly GgufScalar[] };

/** The ggml tensor types this writer can encode (ggml's `enum ggml_type`). */
export const GGML_TYPE = { F32: 0, F16: 1 } as const;
export type GgmlTensorType = keyof typeof GGML_TYPE;

export interface GgufTensor {
  name: string;
  type: GgmlTensorType;
  /** ggml order: the contiguous dimension first, e.g. [n_embd, n_vocab] for token_embd.weight. */
  dims: readonly number[];
  /** Row-major values, converted to `type` when written. */
  data: Float32Array;
}

export interface GgufFile {
  /** Written in insertion order. */
  metadata: Record<string, GgufValue>;
  tensors: readonly GgufTensor[];
}

export const gguf = {
  u32: (value: number): GgufValue => ({ type: 'uint32', value }),
  i32: (value: number): GgufValue => ({ type: 'int32', value }),
  f32: (value: number): GgufValue => ({ type: 'float32', value }),
  bool: (value: boolean): GgufValue => ({ type: 'bool', value }),
  str: (value: string): GgufValue => ({ type: 'string', value }),
  strings: (values: readonly string[]): GgufValue => ({ type: 'array', itemType: 'string', values }),
  i32s: (values: readonly number[]): GgufValue => ({ type: 'array', itemType: 'int32', values }),
  f32s: (values: readonly number[]): GgufValue => ({ type: 'array', itemType: 'float32', values }),
};
