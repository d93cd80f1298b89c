/**
 * The engine model's tokens, approximated from text: no tokenizer, but the same ids for the same
 * text on every run and platform, so that a prompt that repeats a prefix repeats its tokens.
 *
 * - A text's tokens are its words (runs of non-whitespace) cut into chunks of at most
 *   `CHUNK_CHARS` (4) characters: "prefix caching" is `pref`, `ix`, `cach`, `ing`. That is about
 *   one token per 4 characters of English, what BPE tokenizers average. Whitespace is not a
 *   token (so " the" and "the" are one and the same token).
 * - A token's id is the 32-bit FNV-1a hash of its chunk.
 * - A chat prompt is, for each message, a marker token of its role then its content's tokens,
 *   then the assistant's marker (the generation prompt), as a chat template renders it. A
 *   conversation's next turn therefore starts with the tokens of the previous turn's prompt
 *   followed by the answer's: a growing context is a growing chain of the same tokens.
 * - A completions prompt is its text's tokens, or the token ids it carries.
 */
import { fmix32 } from '../routing/hash.js';
export const CHUNK_CHARS = 4;

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

function isSpace(c: number): boolean {
  return c === 32 || (c >= 9 && c <= 13) || c === 0xa0;
}

/** Appends the tokens of `text` to `out` (and returns it). */
export function textTokens(text: string, out: number[] = []): number[] {
  let h = FNV_OFFSET;
  let length = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (isSpace(c)) {
      if (length > 0) out.push(h >>> 0);
      h = FNV_OFFSET;
      length = 0;
      continue;
    }
    if (length === CHUNK_CHARS) {
      out.push(h >>> 0);
      h = FNV_OFFSET;
      length = 0;
    }
    h = Math.imul(h ^ c, FNV_PRIME);
    length++;
  }
  if (length > 0) out.push(h >>> 0);
  return out;
}

/** How many tokens `text` has (without building them). */
export function countTextTokens(text: string): number {
  let count = 0;
  let length = 0;
  for (let i = 0; i < text.length; i++) {
    if (isSpace(text.charCodeAt(i))) {
      length = 0;
      continue;
    }
    if (length === 0 || length === CHUNK_CHARS) {
      count++;
      length = 0;
    }
    length++;
  }
  return count;
}

/** The marker token of a chat role (`<|user|>`, ...). */
export function roleToken(role: string): number {
  return textTokens(`<|${role}|>`.replace(/\s/g, '_'))[0]!;
}

interface ChatMessage {
  role?: unknown;
  content?: unknown;
  tool_calls?: unknown;
}

/** The text of a message's content: a string, or its parts' texts joined with spaces. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    const text = (part as { text?: unknown } | null)?.text;
    if (typeof text === 'string') out += out ? ` ${text}` : text;
  }
  return out;
}

/** The tokens of a chat prompt: each message's role marker and content (tool calls as their name and arguments), then the assistant's marker. */
export function chatTokens(messages: readonly unknown[], addGenerationPrompt = true): number[] {
  const out: number[] = [];
  for (const raw of messages) {
    const m = (raw ?? {}) as ChatMessage;
    out.push(roleToken(typeof m.role === 'string' ? m.role : 'user'));
    textTokens(contentText(m.content), out);
    if (Array.isArray(m.tool_calls)) {
      for (const call of m.tool_calls) {
        const fn = (call as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
        if (typeof fn?.name === 'string') textTokens(fn.name, out);
        if (typeof fn?.arguments === 'string') textTokens(fn.arguments, out);
      }
    }
  }
  if (addGenerationPrompt) out.push(roleToken('assistant'));
  return out;
}

/** The tokens of a completions prompt: a text, texts, or token ids (one list or several, concatenated). */
export function completionTokens(prompt: unknown): number[] {
  if (typeof prompt === 'string') return textTokens(prompt);
  if (!Array.isArray(prompt)) return [];
  const out: number[] = [];
  for (const item of prompt) {
    if (typeof item === 'number') out.push(item >>> 0);
    else if (typeof item === 'string') textTokens(item, out);
    else if (Array.isArray(item)) for (const id of item) if (typeof id === 'number') out.push(id >>> 0);
  }
  return out;
}

const TWO_32 = 0x100000000;
/** Hashes are 53-bit: a 32-bit lane and the top 21 bits of a second one. */
const LOW_BITS = 2 ** 21;

/** A 53-bit hash of `key` (an adapter name, say), the parent of a chain's first block. */
export function chainSeed(key: string | undefined): number {
  if (key === undefined || key === '') return 0;
  return blockHash(0, textTokens(`lora:${key}`), 0, 1);
}

/**
 * The hash of one block: its parent's hash and its tokens `ids[from, to)`, as vLLM's automatic
 * prefix caching hashes a block (parent hash, token ids, extra keys such as the LoRA adapter,
 * which here seeds the chain). Two blocks have the same hash only with the same whole prefix.
 */
export function blockHash(parent: number, ids: ArrayLike<number>, from: number, to: number): number {
  let a = (parent % TWO_32) ^ 0x9e3779b9;
  let b = Math.floor(parent / TWO_32) ^ 0x7f4a7c15;
  for (let i = from; i < to; i++) {
    const id = ids[i]!;
    a = Math.imul(a ^ id, FNV_PRIME);
    b = Math.imul(b ^ id, 0x5bd1e995);
    b ^= b >>> 15;
  }
  a = fmix32(a ^ (to - from));
  b = fmix32(b ^ a);
  return a * LOW_BITS + (b >>> 11);
}

/** The hash chain of the full blocks of `ids` (a last partial block has none), from `seed`. */
export function blockHashes(ids: ArrayLike<number>, blockSize: number, seed = 0): number[] {
  const full = Math.floor(ids.length / blockSize);
  const out = new Array<number>(full);
  let parent = seed;
  for (let k = 0; k < full; k++) {
    parent = blockHash(parent, ids, k * blockSize, (k + 1) * blockSize);
    out[k] = parent;
  }
  return out;
}
