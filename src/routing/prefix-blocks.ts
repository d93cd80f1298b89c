/**
 * A prompt's prefix as a chain of block hashes, the way engines key their prefix caches (vLLM
 * hashes blocks of 16 tokens, each hash covering the block and every block before it). Here the
 * blocks are `blockChars` characters of the prompt text: block `i`'s hash depends on the model
 * and on every character up to the end of block `i`, so two prompts share the hash of block `i`
 * exactly when they share the model and their first `(i + 1) * blockChars` characters (up to
 * hash collisions, at 53 bits negligible). Only whole blocks count: an engine caches whole
 * blocks too. The hashes carry no text: they are what gateway replicas share (affinity-index.ts).
 */

import { fmix32 } from './hash.js';

const TWO_TO_32 = 2 ** 32;

/**
 * The block hashes of `text` for `model`, at most `maxBlocks` of them (the first ones). Each is a
 * safe integer of 53 bits: two independent 32-bit running hashes (FNV-1a and a multiplicative
 * one) carried across blocks, finalised at each block's end.
 */
export function blockHashes(model: string, text: string, blockChars: number, maxBlocks: number): number[] {
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  for (let i = 0; i < model.length; i++) {
    const c = model.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  const blocks = Math.min(Math.floor(text.length / blockChars), maxBlocks);
  const out = new Array<number>(blocks);
  let i = 0;
  for (let block = 0; block < blocks; block++) {
    const end = i + blockChars;
    for (; i < end; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
    }
    out[block] = (fmix32(b) & 0x1fffff) * TWO_TO_32 + fmix32(a);
  }
  return out;
}
