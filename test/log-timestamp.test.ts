import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { cachedIsoTime, createLogger } from '../src/observability/logger.js';

describe('log lines carry an ISO-8601 time, formatted once per second', () => {
  it('writes what Date#toISOString writes, for every millisecond shape and across second, day and year ends', () => {
    const instants = [
      0,
      1,
      9,
      10,
      99,
      100,
      999,
      Date.UTC(2026, 11, 31, 23, 59, 59, 999),
      Date.UTC(2027, 0, 1, 0, 0, 0, 0),
      Date.UTC(2026, 11, 3, 13, 55, 1, 7),
      Date.UTC(2026, 11, 3, 13, 55, 1, 70),
    ];
    // Random instants in the order a clock gives them, and back again (a clock set back).
    let t = Date.UTC(2026, 0, 1);
    for (let i = 0; i < 2000; i++) {
      t += Math.floor(Math.random() * 1500);
      instants.push(t);
    }
    instants.push(Date.UTC(2025, 5, 1, 12, 0, 0, 5));
    let now = 0;
    const time = cachedIsoTime(() => now);
    for (const instant of instants) {
      now = instant;
      expect(time()).toBe(`,"time":"${new Date(instant).toISOString()}"`);
    }
  });

  it('a logger line parses as JSON with that time', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const before = Date.now();
    createLogger('info', sink).info({ requestId: 'r1' }, 'request ended');
    const line = JSON.parse(lines.join('')) as { time: string; requestId: string; msg: string };
    expect(line.requestId).toBe('r1');
    expect(line.msg).toBe('request ended');
    const at = Date.parse(line.time);
    expect(at).toBeGreaterThanOrEqual(before);
    expect(at).toBeLessThanOrEqual(Date.now());
  });
});
