/**
 * The mock's output is a fixed, endless sequence of words, so tests can predict text: token i
 * is ` <WORDS[i mod n]>`. A continuation request (a chat whose last assistant message is to be
 * continued, or a completions prompt) resumes the sequence where the given text left off: the
 * longest tail of the text that equals the first k tokens makes generation start at token k.
 * So a resumed stream ends with the same text as one that never broke.
 */
const WORDS = [
  'the',
  'quick',
  'brown',
  'fox',
  'jumps',
  'over',
  'a',
  'lazy',
  'dog',
  'while',
  'seven',
  'silver',
  'rivers',
  'carry',
  'light',
  'toward',
  'distant',
  'harbors',
  'and',
  'every',
  'lantern',
  'hums',
  'softly',
  'tonight',
];

export function token(i: number): string {
  return ` ${WORDS[i % WORDS.length]}`;
}

/** Tokens 0..k-1 back to back. */
export function sequence(k: number): string {
  let out = '';
  for (let i = 0; i < k; i++) out += token(i);
  return out;
}

/** How many tokens of the sequence `text` already ends with (0 when it ends with none). */
export function tokensAlreadyWritten(text: string): number {
  let best = 0;
  let prefix = '';
  for (let k = 1; prefix.length < text.length; k++) {
    prefix += token(k - 1);
    if (prefix.length > text.length) break;
    if (text.endsWith(prefix)) best = k;
  }
  return best;
}

/** A rough prompt token count: whitespace-separated words. */
export function countWords(text: string): number {
  const trimmed = text.trim();
  return trimmed.length === 0 ? 0 : trimmed.split(/\s+/).length;
}
