/**
 * FNV-1a over UTF-16 code units, then murmur3's 32-bit finaliser. FNV-1a alone mixes the last
 * characters of a key poorly, and ring points are keys like "10.0.0.3:8000#17": measured, that left
 * some of 8 such workers with half again their share of keys; the finaliser brings it within ~20%.
 * Written here because it is a dozen lines and no small, well-kept dependency is worth taking on.
 */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return fmix32(h);
}

/** murmur3's 32-bit finaliser: every input bit moves every output bit. */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
