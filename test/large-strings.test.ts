import { describe, expect, it } from 'vitest';
import { joinLargeStrings, PIECE_CHARS, splitLargeStrings } from '../src/storage/large-strings.js';

describe('large strings cross to the storage thread in pieces', () => {
  it('a call without a string past one piece is sent as it is', () => {
    expect(splitLargeStrings([{ insert: { json: 'x'.repeat(PIECE_CHARS) } }, 'a', 3, null])).toBeUndefined();
  });

  it('strings past a piece, where an ending holds them, come back whole and in place; the rest is untouched', () => {
    const events = `[${'é'.repeat(PIECE_CHARS * 2 + 7)}]`;
    const json = 'j'.repeat(PIECE_CHARS + 1);
    const ending = { insert: { id: 'resp_1', eventsJson: events, json, n: 4 }, update: undefined };
    const args = [ending, ['small', 'l'.repeat(PIECE_CHARS * 3)]];
    const split = splitLargeStrings(args)!;
    expect(split.pieces.map((p) => p.length)).toEqual([3, 2, 3]);
    expect(split.pieces.flat().every((piece) => piece.length <= PIECE_CHARS)).toBe(true);
    // What crosses in the call itself is small.
    expect(JSON.stringify(split.args).length).toBeLessThan(1024);
    // The caller's arguments are not changed.
    expect(ending.insert.eventsJson).toBe(events);
    const back = joinLargeStrings(structuredClone(split.args), structuredClone(split.pieces));
    expect(back).toEqual(args);
  });
});
