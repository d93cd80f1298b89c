/**
 * The tiny model's own tokenizer: GPT-2-style byte-level BPE, stored the way llama.cpp reads a
 * `gpt2` vocabulary. Every byte has a token spelled in GPT-2's byte-to-unicode alphabet (printable
 * bytes stand for themselves, the others are shifted above U+0100, e.g. space is "Ġ"), merges
 * build a few common English words on top, and ChatML control tokens close the vocabulary.
 */

/** llama.cpp's `llama_token_type` as stored in `tokenizer.ggml.token_type`. */
export const TOKEN_TYPE = { normal: 1, control: 3 } as const;

export const SPECIAL_TOKENS = {
  endOfText: '<|endoftext|>',
  imStart: '<|im_start|>',
  imEnd: '<|im_end|>',
} as const;

export const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** Words the merges spell out, each grown one character at a time from its first. */
const WORDS = [
  ' the',
  ' and',
  ' of',
  ' to',
  ' in',
  ' is',
  ' it',
  ' that',
  ' this',
  ' for',
  ' you',
  ' with',
  ' on',
  ' as',
  ' are',
  ' be',
  ' at',
  ' or',
  ' have',
  ' from',
  ' not',
  ' we',
  ' he',
  ' they',
  ' hello',
  ' world',
  ' model',
  ' token',
  ' stream',
  'Hello',
  'The',
  'ing',
  'ed',
  'er',
];

export interface TinyVocabulary {
  tokens: string[];
  tokenTypes: number[];
  merges: string[];
  bos: number;
  eos: number;
  eot: number;
  pad: number;
  imStart: number;
  /** The control tokens. */
  special: number[];
  /** Byte tokens that are not printable ASCII on their own (controls, UTF-8 fragments). */
  unprintable: number[];
}

/** GPT-2's `bytes_to_unicode`: byte value -> the character that spells it in the vocabulary. */
export function byteToUnicode(): string[] {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  const table: string[] = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) table.push(String.fromCodePoint(printable(b) ? b : 256 + shifted++));
  return table;
}

export function buildTinyVocabulary(): TinyVocabulary {
  const map = byteToUnicode();
  const spell = (text: string) => [...Buffer.from(text, 'utf8')].map((b) => map[b]!).join('');
  const tokens = [...map];
  const known = new Set(tokens);
  const merges: string[] = [];
  for (const word of WORDS) {
    const chars = [...spell(word)];
    let piece = chars[0]!;
    for (const next of chars.slice(1)) {
      const merged = piece + next;
      if (!known.has(merged)) {
        merges.push(`${piece} ${next}`);
        tokens.push(merged);
        known.add(merged);
      }
      piece = merged;
    }
  }
  const tokenTypes: number[] = tokens.map(() => TOKEN_TYPE.normal);
  const id = (text: string) => {
    tokens.push(text);
    tokenTypes.push(TOKEN_TYPE.control);
    return tokens.length - 1;
  };
  const endOfText = id(SPECIAL_TOKENS.endOfText);
  const imStart = id(SPECIAL_TOKENS.imStart);
  const imEnd = id(SPECIAL_TOKENS.imEnd);
  return {
    tokens,
    tokenTypes,
    merges,
    bos: endOfText,
    eos: imEnd,
    eot: imEnd,
    pad: endOfText,
    imStart,
    special: [endOfText, imStart, imEnd],
    unprintable: Array.from({ length: 256 }, (_, b) => b).filter(
      (b) => (b < 0x20 && b !== 0x0a) || b >= 0x7f,
    ),
  };
}
