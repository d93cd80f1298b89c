import { describe, expect, it } from 'vitest';
import {
  parseSseFields,
  parseSseFieldsAt,
  plainEventData,
  SseSplitter,
} from '../src/streams/sse-splitter.js';

function split(chunks: string[]): { events: string[]; regions: string[]; buffered: number } {
  const splitter = new SseSplitter();
  const events: string[] = [];
  const regions: string[] = [];
  for (const chunk of chunks) {
    regions.push(
      splitter
        .push(Buffer.from(chunk), (bytes, start, end) => events.push(bytes.toString('utf8', start, end)))
        .toString(),
    );
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

  it('reads an event in place, between its offsets in a larger buffer, and takes the one-step path only for `data: x` alone', () => {
    const events = [
      'data: {"é":1}\n\n',
      'data: a\ndata: b\n\n',
      'data:c\n\n',
      'event: error\ndata: d\n\n',
      ': k\n\n',
      'data: \n\n',
    ];
    const bytes = Buffer.from(`data: before\n\n${events.join('')}data: after\n\n`);
    const seen: {
      plain: string | undefined;
      fields: { event: string | undefined; data: string | undefined };
    }[] = [];
    new SseSplitter().push(bytes, (b, start, end) =>
      seen.push({ plain: plainEventData(b, start, end), fields: parseSseFieldsAt(b, start, end) }),
    );
    expect(seen.slice(1, -1)).toEqual([
      { plain: '{"é":1}', fields: { event: undefined, data: '{"é":1}' } },
      { plain: undefined, fields: { event: undefined, data: 'a\nb' } },
      { plain: undefined, fields: { event: undefined, data: 'c' } },
      { plain: undefined, fields: { event: 'error', data: 'd' } },
      { plain: undefined, fields: { event: undefined, data: undefined } },
      { plain: '', fields: { event: undefined, data: '' } },
    ]);
    expect(seen[0]!.plain).toBe('before');
    expect(seen.at(-1)!.plain).toBe('after');
  });
});

describe('SseSplitter is linear and bounded', () => {
  /** The reference: the grammar read off the whole text with a regular expression. */
  const whole = (text: string): string[] => {
    const events: string[] = [];
    const terminator = /\r\n|\r|\n/g;
    let start = 0;
    let lineStart = 0;
    let afterTerminator = false;
    for (let m = terminator.exec(text); m; m = terminator.exec(text)) {
      const end = m.index + m[0].length;
      if (m.index === lineStart && afterTerminator) {
        events.push(text.slice(start, end));
        start = end;
        afterTerminator = false;
      } else afterTerminator = true;
      lineStart = end;
    }
    return events;
  };

  it('gives the same events however the bytes are cut (mixed terminators, 300 random cuts)', () => {
    const terminators = ['\n\n', '\r\n\r\n', '\r\r', '\n\r\n', '\r\n\n'];
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let round = 0; round < 300; round++) {
      let text = '';
      const count = 1 + Math.floor(random() * 6);
      for (let e = 0; e < count; e++) {
        const lines = 1 + Math.floor(random() * 3);
        for (let l = 0; l < lines; l++)
          text += `data: ${'x'.repeat(Math.floor(random() * 5))}${l < lines - 1 ? (random() < 0.5 ? '\n' : '\r\n') : ''}`;
        text += terminators[Math.floor(random() * terminators.length)];
      }
      text += 'data: tail';
      const cuts: string[] = [];
      let rest = text;
      while (rest.length > 0) {
        const n = 1 + Math.floor(random() * 4);
        cuts.push(rest.slice(0, n));
        rest = rest.slice(n);
      }
      const chunked = split(cuts);
      expect(chunked.events).toEqual(whole(text));
      expect(`${chunked.events.join('')}data: tail`).toBe(text);
      expect(chunked.buffered).toBe('data: tail'.length);
    }
  });

  it('stops at an event that never ends, without growing past its bound', () => {
    const splitter = new SseSplitter(64 * 1024);
    const piece = Buffer.alloc(1024, 0x61);
    let reads = 0;
    while (!splitter.overflowed && reads < 1000) {
      splitter.push(piece, () => {});
      reads++;
      expect(splitter.bufferedBytes).toBeLessThanOrEqual(64 * 1024);
    }
    expect(splitter.overflowed).toBe(true);
    expect(reads).toBe(65);
    expect(splitter.push(Buffer.from('\n\n'), () => {})).toHaveLength(0);
  });

  it('stops at a whole event larger than its bound, after the events before it', () => {
    const splitter = new SseSplitter(16);
    const events: string[] = [];
    const region = splitter.push(
      Buffer.from(`data: ok\n\ndata: ${'y'.repeat(20)}\n\ndata: z\n\n`),
      (bytes, start, end) => events.push(bytes.toString('utf8', start, end)),
    );
    expect(events).toEqual(['data: ok\n\n']);
    expect(region.toString()).toBe('data: ok\n\n');
    expect(splitter.overflowed).toBe(true);
  });

  it('scans an endless line once: 8 MiB in 1 KiB reads under a 16 MiB bound costs about one pass', () => {
    // Counted, not timed: every byte the splitter searches (Buffer#indexOf, from where it starts
    // to where it stops) and every byte it joins (Buffer.concat). The line's bytes are looked for
    // a CR and for an LF once each, never again as more of it arrives, and joined once at its end.
    const splitter = new SseSplitter(16 * 1024 * 1024);
    const piece = Buffer.alloc(1024, 0x62);
    const concat = Buffer.concat;
    const indexOf = Buffer.prototype.indexOf;
    let joined = 0;
    let scanned = 0;
    Buffer.concat = ((list: readonly Uint8Array[], total?: number) => {
      joined += total ?? list.reduce((n, b) => n + b.length, 0);
      return concat(list, total);
    }) as typeof Buffer.concat;
    Buffer.prototype.indexOf = function (this: Buffer, value: never, from?: never, encoding?: never) {
      const found = indexOf.call(this, value, from, encoding);
      const start = typeof from === 'number' ? from : 0;
      scanned += (found === -1 ? this.length : found + 1) - start;
      return found;
    } as typeof Buffer.prototype.indexOf;
    const total = 8192 * piece.length;
    try {
      for (let i = 0; i < 8192; i++) splitter.push(piece, () => {});
      const events: string[] = [];
      splitter.push(Buffer.from('\n\n'), (bytes, _start, end) =>
        events.push(bytes.toString('utf8', end - 4, end)),
      );
      expect(events).toEqual(['bb\n\n']);
    } finally {
      Buffer.concat = concat;
      Buffer.prototype.indexOf = indexOf;
    }
    // Two searches (CR, LF) over each byte once; a rescan of what is held would be ~8192 / 2 passes.
    expect(scanned).toBeGreaterThanOrEqual(total);
    expect(scanned).toBeLessThanOrEqual(2 * total + 16);
    expect(joined).toBeLessThanOrEqual(total + 2);
  });
});
