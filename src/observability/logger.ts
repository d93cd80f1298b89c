import { type Logger, pino } from 'pino';
import pretty from 'pino-pretty';

export type { Logger } from 'pino';

/**
 * Log lines are written in batches of about this many bytes, and at least once a second: at
 * 16 KiB a loaded gateway makes one write per ~50 request lines. A process killed with -9 loses
 * at most this much (and the last second) of its log; a clean exit flushes.
 */
const BATCH_BYTES = 16 * 1024;
const FLUSH_INTERVAL_MS = 1000;

export type LogFormat = 'auto' | 'json' | 'pretty';

/**
 * pino's `isoTime` formats a Date on every line (`toISOString`: a few microseconds, a tenth of
 * pino's cost per request line). The same ISO-8601 text is built here from the second's prefix,
 * formatted once per second, and the milliseconds.
 */
export function cachedIsoTime(now: () => number = Date.now): () => string {
  let second = Number.NaN;
  let prefix = '';
  return () => {
    const ms = now();
    const s = Math.floor(ms / 1000);
    if (s !== second) {
      second = s;
      // "2026-12-03T13:55:01." (toISOString always has the milliseconds after the dot)
      prefix = `,"time":"${new Date(s * 1000).toISOString().slice(0, 20)}`;
    }
    const frac = ms - s * 1000;
    return `${prefix}${frac < 10 ? '00' : frac < 100 ? '0' : ''}${frac}Z"`;
  };
}

/**
 * Logs on stdout: coloured lines for a person when stdout is a terminal (or `pretty`), JSON
 * lines otherwise (or `json`), for machines.
 *
 * JSON logs on stdout. Writes are batched: one write per log line costs a system call per
 * request on the hot path (measured at about a tenth of the gateway's CPU); a timer flushes
 * what is pending every second, and `flush` runs on shutdown.
 */
export function createLogger(
  level: string,
  destination?: NodeJS.WritableStream,
  format: LogFormat = 'auto',
): Logger {
  if (!destination && (format === 'pretty' || (format === 'auto' && process.stdout.isTTY === true))) {
    return pino(
      { level, base: { service: 'sluice' }, timestamp: pino.stdTimeFunctions.isoTime },
      pretty({
        colorize: process.stdout.isTTY === true,
        translateTime: 'SYS:HH:MM:ss.l',
        ignore: 'service,hostname',
        singleLine: true,
        sync: true,
      }),
    );
  }
  if (destination)
    return pino({ level, base: { service: 'sluice' }, timestamp: cachedIsoTime() }, destination);
  // Buffer mode: in its default (utf8) mode sonic-boom appends each line to one string and takes
  // that string's byte length on every write, which flattens it, so a line costs as much as the
  // batch pending before it (measured: 9 KB allocated per request line at a 16 KiB batch, the
  // largest allocation of a stream's opening). In buffer mode it keeps the lines as Buffers with
  // their lengths and joins them once per write.
  const stream = pino.destination({
    sync: false,
    minLength: BATCH_BYTES,
    maxWrite: 4 * BATCH_BYTES,
    contentMode: 'buffer',
  });
  const timer = setInterval(() => stream.flush(), FLUSH_INTERVAL_MS);
  timer.unref();
  process.once('exit', () => {
    try {
      stream.flushSync();
    } catch {
      // stdout already closed
    }
  });
  // pino writes strings; sonic-boom's buffer mode takes Buffers (its typings say string).
  const write = stream.write.bind(stream) as unknown as (line: Buffer) => boolean;
  const batched = {
    write: (line: string) => write(Buffer.from(line, 'utf8')),
    flush: () => stream.flush(),
    flushSync: () => stream.flushSync(),
  };
  return pino({ level, base: { service: 'sluice' }, timestamp: cachedIsoTime() }, batched);
}
