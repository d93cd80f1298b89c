import { describe, expect, it } from 'vitest';
import { RequestError } from '../src/engine/request-schema.js';
import { planToolCall, type ToolCallPlan, ToolCallText, toGrammarSchema } from '../src/engine/tools.js';

const tool = (name: string, parameters?: Record<string, unknown>) => ({
  type: 'function' as const,
  function: { name, ...(parameters ? { parameters } : {}) },
});

describe('tool schemas as grammar schemas', () => {
  it('keeps what the grammar can express and widens the rest', () => {
    expect(
      toGrammarSchema({
        type: 'object',
        properties: {
          a: { anyOf: [{ type: 'string', maxLength: 5, pattern: 'x+' }, { type: 'null' }] },
          b: { type: ['integer', 'null'] },
          c: { $ref: '#/definitions/C' },
          d: { enum: ['x', 1] },
          e: { type: 'array', items: { type: 'number', minimum: 3 }, maxItems: 2 },
          f: { type: 'object' },
          g: { type: ['string', 'object'] },
          h: {},
        },
        required: ['a'],
      }),
    ).toEqual({
      type: 'object',
      properties: {
        a: { oneOf: [{ type: 'string', maxLength: 5 }, { type: 'null' }] },
        b: { type: ['integer', 'null'] },
        c: { $ref: '#/$defs/C' },
        d: { enum: ['x', 1] },
        e: { type: 'array', items: { type: 'number' }, maxItems: 2 },
        f: { type: 'object', additionalProperties: true },
        g: { oneOf: [{ type: 'string' }, { type: 'object', additionalProperties: true }] },
        h: {
          oneOf: [
            { type: ['string', 'number', 'boolean', 'null'] },
            { type: 'object', additionalProperties: true },
            { type: 'array' },
          ],
        },
      },
    });
  });

  it('plans a named call, a choice between tools, or none', () => {
    const weather = tool('weather', { type: 'object', properties: { city: { type: 'string' } } });
    const ping = tool('ping');
    expect(planToolCall([weather, ping], 'auto')).toBeUndefined();
    expect(planToolCall([weather, ping], 'none')).toBeUndefined();
    expect(planToolCall(undefined, undefined)).toBeUndefined();
    expect(planToolCall([weather, ping], { type: 'function', function: { name: 'ping' } })).toEqual({
      kind: 'named',
      name: 'ping',
      schema: { type: 'object', additionalProperties: true },
    });
    expect(planToolCall([weather], 'required')).toMatchObject({ kind: 'named', name: 'weather' });
    expect(planToolCall([weather, ping], 'required')).toEqual({
      kind: 'choose',
      names: ['weather', 'ping'],
      schema: {
        oneOf: [
          {
            type: 'object',
            properties: {
              name: { const: 'weather' },
              arguments: { type: 'object', properties: { city: { type: 'string' } } },
            },
          },
          {
            type: 'object',
            properties: {
              name: { const: 'ping' },
              arguments: { type: 'object', additionalProperties: true },
            },
          },
        ],
      },
    });
    expect(() => planToolCall([], 'required')).toThrow(RequestError);
    expect(() => planToolCall([weather], { type: 'function', function: { name: 'nope' } })).toThrow(
      /not in `tools`/,
    );
  });
});

describe('the text of a forced call', () => {
  const run = async (plan: ToolCallPlan, pieces: string[]) => {
    const events: string[] = [];
    const text = new ToolCallText(plan, {
      start: (name) => {
        events.push(`start ${name}`);
      },
      arguments: (piece) => {
        events.push(piece);
      },
    });
    await text.begin();
    for (const piece of pieces) await text.push(piece);
    await text.end();
    return { events, text };
  };

  it('a named call: the name at once, every piece is arguments', async () => {
    const plan: ToolCallPlan = { kind: 'named', name: 'f', schema: { type: 'object' } };
    const { events, text } = await run(plan, ['{"a"', ':', ' 1}']);
    expect(events).toEqual(['start f', '{"a"', ':', ' 1}']);
    expect(text.arguments).toBe('{"a": 1}');
  });

  it('a choice: the name once generated, the envelope left out of the arguments', async () => {
    const plan: ToolCallPlan = { kind: 'choose', names: ['f', 'g'], schema: { type: 'object' } };
    const pieces = ['{"na', 'me": "g', '", "arguments"', ': {"x', '": {"y": 1', '}', '}', '\n', '}'];
    const { events, text } = await run(plan, pieces);
    expect(events[0]).toBe('start g');
    expect(text.name).toBe('g');
    expect(text.arguments).toBe('{"x": {"y": 1}}');
    expect(events.slice(1).join('')).toBe(text.arguments);
    expect(text.unparsed).toBe('');
  });

  it('a choice cut short before its name: no call, the text stays', async () => {
    const plan: ToolCallPlan = { kind: 'choose', names: ['f', 'g'], schema: { type: 'object' } };
    const { events, text } = await run(plan, ['{"name": "', 'f']);
    expect(events).toEqual([]);
    expect(text.name).toBeUndefined();
    expect(text.unparsed).toBe('{"name": "f');
  });
});
