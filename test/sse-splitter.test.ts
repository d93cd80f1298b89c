import { describe, expect, it } from 'vitest';
import { parseSseFields, SseSplitter } from '../src/streams/sse-splitter.js';

function split(chunks: string[]): { events: string[]; regions: string[]; buffered: number } {
  const splitter = new SseSplitter();
  const events: string[] = [];
  const regions: string[] = [];
  for (const chunk of chunks) {
    regions.push(splitter.push(Buffer.from(chunk), (raw) => events.push(raw.toString())).toString());
  }
  return { events, regions, buffered: splitter.bufferedBytes };
}

describe('SseSplitter keeps the exact bytes of whole events', () => {
  it('splits on \\n\\n, \\r\\n\\r\\n and \\r\\r', () => {
    const { events } = split(['data: a\n\ndata: b\r\n\r\ndata: c\r\rdata: d\n\n']);
    expect(events).toEqual(['data: a\n\n', 'data: b\r\n\r\n', 'data: c\r\r', 'data: d\n\n']);
  });

  it('holds back a partial event across chunks, even a split terminator', () => {
    const { events, regions, buffered } = split([
      'data: {"a"',
      ':1}\n',
      '\ndata: x\r',
      '\n\r',
      '\ndata: tail',
    ]);
    expect(events).toEqual(['data: {"a":1}\n\n', 'data: x\r\n\r\n']);
    expect(regions).toEqual(['', '', 'data: {"a":1}\n\n', '', 'data: x\r\n\r\n']);
    expect(buffered).toBe('data: tail'.length);
  });

  it('returns the whole chunk when it holds only whole events', () => {
    const splitter = new SseSplitter();
    const chunk = Buffer.from('data: 1\n\ndata: 2\n\n');
    expect(splitter.push(chunk, () => {})).toBe(chunk);
  });

  it('keeps multi-line events together', () => {
    const { events } = split(['event: error\ndata: {"message":"x"}\n\n: comment\n\n']);
    expect(events).toEqual(['event: error\ndata: {"message":"x"}\n\n', ': comment\n\n']);
  });
});

describe('parseSseFields', () => {
  it('decodes data, event, comments and multi-line data', () => {
    expect(parseSseFields(Buffer.from('data: {"x":1}\n\n'))).toEqual({ event: undefined, data: '{"x":1}' });
    expect(parseSseFields(Buffer.from('event: error\ndata: oops\n\n'))).toEqual({
      event: 'error',
      data: 'oops',
    });
    expect(parseSseFields(Buffer.from(': keep-alive\n\n'))).toEqual({ event: undefined, data: undefined });
    expect(parseSseFields(Buffer.from('data:a\r\ndata: b\r\n\r\n'))).toEqual({
      event: undefined,
      data: 'a\nb',
    });
    expect(parseSseFields(Buffer.from('id: 7\nretry: 10\ndata: z\n\n')).data).toBe('z');
  });
});
