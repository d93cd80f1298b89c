/**
 * Cheap checks of a message from the shared Redis before it is decoded and parsed: whoever can
 * publish there can send anything, and what is dropped must cost less than parsing it. JSON
 * nested thousands deep parses at about 70 ms per MB (valid JSON of the same size at 20), so the
 * nesting is bounded by one pass over the bytes first.
 */

const OPEN_OBJECT = 0x7b; // {
const OPEN_ARRAY = 0x5b; // [
const CLOSE_OBJECT = 0x7d; // }
const CLOSE_ARRAY = 0x5d; // ]
const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \

/**
 * Whether `bytes` is a JSON object (its first byte `{`) whose arrays and objects nest at most
 * `maxDepth` deep (brackets inside strings do not count). Not a validation: JSON.parse still
 * judges the rest.
 */
export function objectWithinDepth(bytes: Uint8Array, maxDepth: number): boolean {
  if (bytes[0] !== OPEN_OBJECT) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) inString = false;
    } else if (b === QUOTE) inString = true;
    else if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
      if (++depth > maxDepth) return false;
    } else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) depth--;
  }
  return true;
}
