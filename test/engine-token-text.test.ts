import type { Token } from 'node-llama-cpp';
import { describe, expect, it } from 'vitest';
import { TokenText } from '../src/engine/token-text.js';

/** A fake byte-level vocabulary: token n is byte n; decoding is UTF-8 with replacement chars. */
const detokenize = (tokens: readonly Token[]) => Buffer.from(tokens.map(Number)).toString('utf8');
const tokensOf = (text: string) => [...Buffer.from(text, 'utf8')] as Token[];

function run(text: string, stops: string[]): { pieces: string[]; stoppedBy: string | undefined } {
  const stream = new TokenText(detokenize, stops);
  const pieces: string[] = [];
  for (const token of tokensOf(text)) {
    const piece = stream.push(token);
    if (piece) pieces.push(piece);
    if (stream.stoppedBy !== undefined) break;
  }
  const rest = stream.flush();
  if (rest) pieces.push(rest);
  return { pieces, stoppedBy: stream.stoppedBy };
}

describe('TokenText', () => {
  it('sends each token as soon as it is a whole character', () => {
    expect(run('abc', []).pieces).toEqual(['a', 'b', 'c']);
  });

  it('holds a multi-byte character until its last byte', () => {
    expect(run('aé€😀', []).pieces).toEqual(['a', 'é', '€', '😀']);
  });

  it('gives up waiting on bytes that never become a character', () => {
    const stream = new TokenText(detokenize, []);
    const pieces = [0x80, 0x80, 0x80, 0x80, 0x41].map((b) => stream.push(b as Token));
    expect(pieces.join('')).toBe('\ufffd\ufffd\ufffd\ufffdA');
  });

  it('ends at a stop string, which is not sent', () => {
    expect(run('hello world, bye', ['world'])).toEqual({
      pieces: ['h', 'e', 'l', 'l', 'o', ' '],
      stoppedBy: 'world',
    });
  });

  it('holds text that may start a stop string, and sends it once it does not', () => {
    expect(run('a wox', ['world']).pieces).toEqual(['a', ' ', 'wox']);
  });

  it('sends held text at the end when the stop string never completes', () => {
    expect(run('ab wor', ['world']).pieces).toEqual(['a', 'b', ' ', 'wor']);
  });

  it('ends at the earliest of several stop strings; empty ones are ignored', () => {
    expect(run('xxabcd', ['', 'cd', 'bc']).stoppedBy).toBe('bc');
    expect(run('xxabcd', ['', 'cd', 'bc']).pieces.join('')).toBe('xxa');
  });
});
