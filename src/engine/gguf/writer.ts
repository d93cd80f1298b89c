import { writeFile } from 'node:fs/promises';
import { ByteWriter } from './byte-writer.js';
import { toFloat16Bits } from './float16.js';
import {
  GGML_TYPE,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_VALUE_TYPE,
  GGUF_VERSION,
  type GgufFile,
  type GgufScalar,
  type GgufScalarType,
  type GgufTensor,
  type GgufValue,
} from './types.js';

/**
 * A GGUF v3 writer (the layout is described in types.ts). Hand-written because no maintained npm
 * package writes GGUF files: node-llama-cpp only reads them, @huggingface/gguf parses them and can
 * at most rebuild the metadata header of an existing file, and the reference writer is llama.cpp's
 * Python `gguf` package. This covers what the tiny model needs: every metadata type, arrays of
 * scalars and strings, F32 and F16 tensors.
 */
export function encodeGguf(file: GgufFile): Buffer {
  const alignment = alignmentOf(file);
  const out = new ByteWriter();
  const entries = Object.entries(file.metadata);
  out.u32(GGUF_MAGIC);
  out.u32(GGUF_VERSION);
  out.u64(file.tensors.length);
  out.u64(entries.length);
  for (const [key, value] of entries) {
    writeString(out, key);
    writeValue(out, value);
  }

  let offset = 0;
  for (const tensor of file.tensors) {
    checkTensor(tensor);
    writeString(out, tensor.name);
    out.u32(tensor.dims.length);
    for (const d of tensor.dims) out.u64(d);
    out.u32(GGML_TYPE[tensor.type]);
    out.u64(offset);
    offset += alignUp(byteSize(tensor), alignment);
  }
  out.pad(alignment);

  for (const tensor of file.tensors) {
    if (tensor.type === 'F32') for (const v of tensor.data) out.f32(v);
    else for (const v of tensor.data) out.u16(toFloat16Bits(v));
    out.pad(alignment);
  }
  return out.toBuffer();
}

export async function writeGguf(path: string, file: GgufFile): Promise<void> {
  await writeFile(path, encodeGguf(file));
}

function alignmentOf(file: GgufFile): number {
  const value = file.metadata['general.alignment'];
  if (value === undefined) return GGUF_DEFAULT_ALIGNMENT;
  if (value.type !== 'uint32' || value.value <= 0 || value.value % 8 !== 0)
    throw new Error('general.alignment must be a uint32 multiple of 8');
  return value.value;
}

function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}

function byteSize(tensor: GgufTensor): number {
  return tensor.data.length * (tensor.type === 'F32' ? 4 : 2);
}

function checkTensor(tensor: GgufTensor): void {
  const count = tensor.dims.reduce((a, b) => a * b, 1);
  if (tensor.dims.length === 0 || tensor.dims.length > 4 || count !== tensor.data.length)
    throw new Error(
      `tensor ${tensor.name}: dims ${tensor.dims.join('x')} do not match ${tensor.data.length} values`,
    );
}

function writeString(out: ByteWriter, s: string): void {
  const bytes = Buffer.from(s, 'utf8');
  out.u64(bytes.length);
  out.bytes(bytes);
}

function writeValue(out: ByteWriter, value: GgufValue): void {
  out.u32(GGUF_VALUE_TYPE[value.type]);
  if (value.type === 'array') {
    out.u32(GGUF_VALUE_TYPE[value.itemType]);
    out.u64(value.values.length);
    for (const item of value.values) writeScalar(out, value.itemType, item);
  } else {
    writeScalar(out, value.type, value.value);
  }
}

function writeScalar(out: ByteWriter, type: GgufScalarType, v: GgufScalar): void {
  if (type === 'string') writeString(out, str(v));
  else if (type === 'bool') out.u8(bool(v) ? 1 : 0);
  else if (type === 'uint64') out.u64(wide(v));
  else if (type === 'int64') out.i64(wide(v));
  else if (type === 'float32') out.f32(num(v));
  else if (type === 'float64') out.f64(num(v));
  else out[INTEGER_WRITERS[type]](int(v));
}

const INTEGER_WRITERS = {
  uint8: 'u8',
  int8: 'i8',
  uint16: 'u16',
  int16: 'i16',
  uint32: 'u32',
  int32: 'i32',
} as const;

function str(v: GgufScalar): string {
  if (typeof v !== 'string') throw new TypeError(`expected a string, got ${String(v)}`);
  return v;
}

function bool(v: GgufScalar): boolean {
  if (typeof v !== 'boolean') throw new TypeError(`expected a boolean, got ${String(v)}`);
  return v;
}

function num(v: GgufScalar): number {
  if (typeof v !== 'number') throw new TypeError(`expected a number, got ${String(v)}`);
  return v;
}

function int(v: GgufScalar): number {
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw new TypeError(`expected an integer, got ${String(v)}`);
  return v;
}

function wide(v: GgufScalar): number | bigint {
  return typeof v === 'bigint' ? v : int(v);
}
