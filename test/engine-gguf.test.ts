import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readGgufFileInfo } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromFloat16Bits, toFloat16Bits } from '../src/engine/gguf/float16.js';
import { type GgufFile, gguf } from '../src/engine/gguf/types.js';
import { encodeGguf, writeGguf } from '../src/engine/gguf/writer.js';

/** A minimal GGUF reader, independent of the writer: enough to check every byte it laid out. */
function readGguf(buf: Buffer) {
  let at = 0;
  const u32 = () => {
    const v = buf.readUInt32LE(at);
    at += 4;
    return v;
  };
  const u64 = () => {
    const v = Number(buf.readBigUInt64LE(at));
    at += 8;
    return v;
  };
  const str = () => {
    const n = u64();
    const s = buf.toString('utf8', at, at + n);
    at += n;
    return s;
  };
  const scalar = (type: number): unknown => {
    switch (type) {
      case 0:
        return buf.readUInt8(at++);
      case 1:
        return buf.readInt8(at++);
      case 4:
        return u32();
      case 5: {
        const v = buf.readInt32LE(at);
        at += 4;
        return v;
      }
      case 6: {
        const v = buf.readFloatLE(at);
        at += 4;
        return v;
      }
      case 7:
        return buf.readUInt8(at++) === 1;
      case 8:
        return str();
      case 10: {
        const v = buf.readBigUInt64LE(at);
        at += 8;
        return v;
      }
      case 12: {
        const v = buf.readDoubleLE(at);
        at += 8;
        return v;
      }
      default:
        throw new Error(`type ${type} not read by this test`);
    }
  };
  const magic = buf.toString('latin1', 0, 4);
  at = 4;
  const version = u32();
  const tensorCount = u64();
  const kvCount = u64();
  const metadata: Record<string, unknown> = {};
  for (let i = 0; i < kvCount; i++) {
    const key = str();
    const type = u32();
    if (type === 9) {
      const itemType = u32();
      const n = u64();
      metadata[key] = Array.from({ length: n }, () => scalar(itemType));
    } else metadata[key] = scalar(type);
  }
  const tensors: { name: string; dims: number[]; type: number; offset: number }[] = [];
  for (let i = 0; i < tensorCount; i++) {
    const name = str();
    const nDims = u32();
    const dims = Array.from({ length: nDims }, u64);
    tensors.push({ name, dims, type: u32(), offset: u64() });
  }
  const infoEnd = at;
  return { magic, version, metadata, tensors, infoEnd };
}

const file: GgufFile = {
  metadata: {
    'general.architecture': gguf.str('llama'),
    'general.alignment': gguf.u32(64),
    'test.i32': gguf.i32(-7),
    'test.f32': gguf.f32(0.5),
    'test.bool': gguf.bool(true),
    'test.u8': { type: 'uint8', value: 200 },
    'test.i8': { type: 'int8', value: -100 },
    'test.u64': { type: 'uint64', value: 2n ** 40n },
    'test.f64': { type: 'float64', value: Math.PI },
    'test.words': gguf.strings(['Ġthe', 'héllo', '<|im_end|>', '']),
    'test.ints': gguf.i32s([1, -2, 3]),
  },
  tensors: [
    { name: 'a', type: 'F32', dims: [3], data: new Float32Array([1, -2, 0.25]) },
    { name: 'b', type: 'F16', dims: [2, 3], data: new Float32Array([0, 1, -1, 0.5, 65504, 1e-5]) },
    { name: 'c', type: 'F32', dims: [1], data: new Float32Array([42]) },
  ],
};

describe('GGUF writer', () => {
  const bytes = encodeGguf(file);
  const parsed = readGguf(bytes);

  it('writes the v3 header', () => {
    expect(parsed.magic).toBe('GGUF');
    expect(parsed.version).toBe(3);
    expect(parsed.tensors).toHaveLength(3);
    expect(Object.keys(parsed.metadata)).toEqual(Object.keys(file.metadata));
  });

  it('writes typed metadata, arrays of strings included', () => {
    expect(parsed.metadata).toMatchObject({
      'general.architecture': 'llama',
      'general.alignment': 64,
      'test.i32': -7,
      'test.f32': 0.5,
      'test.bool': true,
      'test.u8': 200,
      'test.i8': -100,
      'test.u64': 2n ** 40n,
      'test.f64': Math.PI,
      'test.words': ['Ġthe', 'héllo', '<|im_end|>', ''],
      'test.ints': [1, -2, 3],
    });
  });

  it('aligns the data section and every tensor to general.alignment', () => {
    const dataStart = Math.ceil(parsed.infoEnd / 64) * 64;
    expect(bytes.subarray(parsed.infoEnd, dataStart).every((b) => b === 0)).toBe(true);
    expect(parsed.tensors.map((t) => [t.name, t.dims, t.type, t.offset])).toEqual([
      ['a', [3], 0, 0],
      ['b', [2, 3], 1, 64],
      ['c', [1], 0, 128],
    ]);
    expect(bytes.length).toBe(dataStart + 192);
    const a = parsed.tensors[0]!;
    const at = dataStart + a.offset;
    expect([bytes.readFloatLE(at), bytes.readFloatLE(at + 4), bytes.readFloatLE(at + 8)]).toEqual([
      1, -2, 0.25,
    ]);
    const b = dataStart + parsed.tensors[1]!.offset;
    const halves = Array.from({ length: 6 }, (_, i) => fromFloat16Bits(bytes.readUInt16LE(b + 2 * i)));
    expect(halves.slice(0, 5)).toEqual([0, 1, -1, 0.5, 65504]);
    expect(halves[5]).toBeCloseTo(1e-5, 7);
    expect(bytes.readFloatLE(dataStart + 128)).toBe(42);
  });

  it('uses 32-byte alignment when general.alignment is absent', () => {
    const plain = encodeGguf({ metadata: {}, tensors: file.tensors });
    const info = readGguf(plain);
    expect(info.tensors.map((t) => t.offset)).toEqual([0, 32, 64]);
    expect(plain.length).toBe(Math.ceil(info.infoEnd / 32) * 32 + 96);
  });

  it('rejects a tensor whose dims do not match its data', () => {
    expect(() =>
      encodeGguf({
        metadata: {},
        tensors: [{ name: 'x', type: 'F32', dims: [2, 2], data: new Float32Array(3) }],
      }),
    ).toThrow(/dims 2x2/);
  });

  it('converts to float16 with round-to-nearest-even, overflow and subnormals', () => {
    expect(toFloat16Bits(1)).toBe(0x3c00);
    expect(toFloat16Bits(-2)).toBe(0xc000);
    expect(toFloat16Bits(65504)).toBe(0x7bff);
    expect(toFloat16Bits(1e6)).toBe(0x7c00);
    expect(toFloat16Bits(2 ** -24)).toBe(0x0001);
    expect(toFloat16Bits(2 ** -26)).toBe(0);
    expect(toFloat16Bits(1 + 2 ** -11)).toBe(0x3c00); // a tie rounds to the even mantissa
    expect(toFloat16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(Number.isNaN(fromFloat16Bits(toFloat16Bits(Number.NaN)))).toBe(true);
  });

  describe('read back by node-llama-cpp', () => {
    let dir: string;
    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'sluice-gguf-'));
    });
    afterAll(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    it('parses the header, metadata and tensor infos', async () => {
      const path = join(dir, 'test.gguf');
      await writeGguf(path, file);
      const info = await readGgufFileInfo(path, { sourceType: 'filesystem', logWarnings: false });
      expect(info.version).toBe(3);
      expect(Number(info.tensorCount)).toBe(3);
      const raw = info.metadata as unknown as Record<string, Record<string, unknown>>;
      expect(raw.general?.architecture).toBe('llama');
      expect(raw.test?.words).toEqual(['Ġthe', 'héllo', '<|im_end|>', '']);
      expect(info.tensorInfo?.map((t) => [t.name, t.dimensions.map(Number), Number(t.offset)])).toEqual([
        ['a', [3], 0],
        ['b', [2, 3], 64],
        ['c', [1], 128],
      ]);
    });
  });
});
