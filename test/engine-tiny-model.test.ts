import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readGgufFileInfo } from 'node-llama-cpp';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureTinyModel } from '../src/engine/embedded-worker.js';
import { encodeTinyModel, TINY_MODEL_SHAPE, writeTinyModel } from '../src/engine/tiny-model.js';
import { byteToUnicode, TOKEN_TYPE } from '../src/engine/tiny-tokenizer.js';

describe('the tiny model file', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-tiny-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('is the same bytes for the same seed, other bytes for another seed, and small', async () => {
    const [a, b, c] = ['a', 'b', 'c'].map((name) => join(dir, `${name}.gguf`)) as [string, string, string];
    const written = await writeTinyModel(a, { seed: 7 });
    await writeTinyModel(b, { seed: 7 });
    await writeTinyModel(c, { seed: 8 });
    const [bytesA, bytesB, bytesC] = await Promise.all([a, b, c].map((p) => readFile(p)));
    expect(bytesA!.length).toBe(written.bytes);
    expect(bytesA!.equals(bytesB!)).toBe(true);
    expect(bytesA!.equals(bytesC!)).toBe(false);
    expect(bytesA!.length).toBeGreaterThan(100_000);
    expect(bytesA!.length).toBeLessThan(4 * 1024 * 1024);
  });

  it('describes a llama model with a GPT-2 byte-level BPE tokenizer and a ChatML template', async () => {
    const path = join(dir, 'meta.gguf');
    await writeTinyModel(path, { seed: 1 });
    const info = await readGgufFileInfo(path, { sourceType: 'filesystem', logWarnings: false });
    const meta = info.metadata;
    expect(meta.general.architecture).toBe('llama');
    const llama = (meta as unknown as { llama: Record<string, unknown> }).llama;
    expect(llama).toMatchObject({
      context_length: TINY_MODEL_SHAPE.contextLength,
      embedding_length: TINY_MODEL_SHAPE.embedding,
      block_count: TINY_MODEL_SHAPE.layers,
      feed_forward_length: TINY_MODEL_SHAPE.feedForward,
    });

    const tok = meta.tokenizer.ggml;
    expect(tok.model).toBe('gpt2');
    const tokens = tok.tokens as string[];
    const types = tok.token_type as number[];
    expect(tokens.length).toBeGreaterThan(300);
    expect(tokens.length).toBeLessThan(600);
    expect(tokens.slice(0, 256)).toEqual(byteToUnicode());
    expect(new Set(tokens).size).toBe(tokens.length);
    expect(tokens[32]).toBe('Ġ');
    for (const special of ['<|endoftext|>', '<|im_start|>', '<|im_end|>']) {
      expect(types[tokens.indexOf(special)]).toBe(TOKEN_TYPE.control);
    }
    expect(tokens[tok.eos_token_id!]).toBe('<|im_end|>');
    expect(tokens[tok.bos_token_id!]).toBe('<|endoftext|>');

    // Every merge joins two tokens into a third, all in the vocabulary.
    const merges = tok.merges as string[];
    expect(merges.length).toBeGreaterThan(30);
    const known = new Set(tokens);
    for (const merge of merges) {
      const [left, right, ...rest] = merge.split(' ');
      expect(rest).toEqual([]);
      expect(known.has(left!) && known.has(right!) && known.has(left! + right!)).toBe(true);
    }
    expect(known.has('Ġthe')).toBe(true);
    expect(meta.tokenizer.chat_template).toContain('<|im_start|>');

    expect(info.tensorInfo?.map((t) => t.name)).toContain('blk.1.ffn_down.weight');
  });

  it('is written again in the data dir when the file there is from another version', async () => {
    const dataDir = join(dir, 'data');
    const path = join(dataDir, 'models', 'sluice-tiny.gguf');
    await mkdir(join(dataDir, 'models'), { recursive: true });
    // The model of earlier versions, whose answers never end.
    await writeTinyModel(path, { seed: 1, endless: true });
    const log = pino({ level: 'silent' });
    expect(await ensureTinyModel(dataDir, log)).toBe(path);
    expect((await readFile(path)).equals(encodeTinyModel({ seed: 1 }))).toBe(true);
    // The current file is left as it is.
    const written = (await stat(path)).mtimeMs;
    await new Promise((resolve) => setTimeout(resolve, 20));
    await ensureTinyModel(dataDir, log);
    expect((await stat(path)).mtimeMs).toBe(written);
    await writeFile(path, 'damaged');
    await ensureTinyModel(dataDir, log);
    expect((await readFile(path)).equals(encodeTinyModel({ seed: 1 }))).toBe(true);
  });
});
