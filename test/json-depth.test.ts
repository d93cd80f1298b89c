import { describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, nestedDeeperThan, parseJsonBody } from '../src/api/json-body.js';

const nested = (depth: number, open: string, close: string, inner = '1') =>
  `${open.repeat(depth)}${inner}${close.repeat(depth)}`;

describe('the nesting bound of JSON request bodies (walked on the parsed value)', () => {
  it('takes a body nested exactly to the bound and refuses one a level deeper, arrays and objects alike', () => {
    for (const [open, close] of [
      ['[', ']'],
      ['{"a":', '}'],
    ] as const) {
      expect(() => parseJsonBody(nested(MAX_JSON_DEPTH, open, close), 'POST')).not.toThrow();
      expect(() => parseJsonBody(nested(MAX_JSON_DEPTH + 1, open, close), 'POST')).toThrow(
        /nested more than 128/,
      );
    }
  });

  it('counts the deepest branch, not the first, and an empty container as a level', () => {
    const deepLast = `{"a":1,"b":[{"c":"x"}],"z":${nested(MAX_JSON_DEPTH, '[', ']', '[]')}}`;
    expect(nestedDeeperThan(JSON.parse(deepLast), MAX_JSON_DEPTH)).toBe(true);
    expect(nestedDeeperThan(JSON.parse('[[]]'), 1)).toBe(true);
    expect(nestedDeeperThan(JSON.parse('[[]]'), 2)).toBe(false);
    expect(nestedDeeperThan(JSON.parse('{}'), 0)).toBe(true);
    expect(nestedDeeperThan('a string', 0)).toBe(false);
  });

  it('brackets inside strings are text, not nesting', () => {
    const text = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: '['.repeat(500) }] });
    expect(() => parseJsonBody(text, 'POST')).not.toThrow();
  });
});
