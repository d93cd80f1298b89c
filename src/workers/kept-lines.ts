import { StringDecoder } from 'node:string_decoder';
import { setImmediate as turn } from 'node:timers/promises';

/**
 * What the scraper keeps of a `/metrics` body before it is parsed, and why it is bounded as it is.
 *
 * The parser (`parse-prometheus-text-format`; the one other text parser on npm,
 * `prom2javascript`, reads no `:` in a name) builds every label value a character at a time:
 * measured at 0.3-0.6 µs a byte of kept lines on the event loop (`npx tsx bench/metrics-read.ts`),
 * 2.3 s for a `/metrics` of 3.9 MB of a wanted family, during which no request moved. So the
 * cost of one read is bounded where it is decided, before the parse:
 *
 * - the lines kept of the wanted families are at most `maxSampleBytes` (64 KiB by default:
 *   a vLLM of 64 data-parallel engines keeps 18 KiB of them); more is `too_large`, a reading
 *   refused unparsed, as a body past `maxBytes` is;
 * - vLLM's `lora_requests_info` keeps one series per combination of adapters it has ever seen
 *   (an engine up for days writes thousands), and only the newest of each scheduler is read
 *   (engine-metric-names.ts): the others are dropped as they stream by, so a real engine's
 *   history costs nothing against the bound;
 * - the body is read in turns of the event loop (one per 64 KiB), not in one go: chunks that
 *   arrived together no longer make one long task of the whole body.
 *
 * Under the bound a read then held the loop 1-20 ms at worst (hostile lines of 37-59 KiB kept,
 * or refused), on a shared 2-core machine; the hostile bodies of 1.9-3.9 MB held it 190-2,300 ms. Weighed and not taken: parsing in a worker thread (the CPU
 * is still spent, on every read of every worker, and the parse of 4 MiB outlives the interval)
 * and another parser (none kept up reads these names).
 */

/** A reading whose kept lines are past the bound: refused before it is parsed. */
export class KeptTooLarge extends Error {}

export interface KeptLimits {
  /** Most bytes of the body read. */
  readonly maxBytes: number;
  /** Most bytes of the wanted families' lines kept (after the newest-series reduction). */
  readonly maxSampleBytes: number;
}

/** The families of which only the newest series of each scheduler is read, and their labels that are not the scheduler's. */
export interface NewestSeries {
  readonly families: ReadonlySet<string>;
  readonly stateLabels: ReadonlySet<string>;
}

/** Lines of the wanted families kept from one body; more is not an engine's exposition. */
const MAX_KEPT_LINES = 10_000;
/** A line longer than this is skipped to its end, not held (no wanted sample is that long). */
const MAX_LINE_CHARS = 256 * 1024;
/** Bytes of body read between two turns of the event loop. */
const TURN_BYTES = 64 * 1024;

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"/y;
const AFTER_VALUE = /[ \t]*([,}])/y;

/** The index of the quote that ends a label value begun at `from`, or -1. */
function closingQuote(line: string, from: number): number {
  for (let at = from; ; ) {
    const quote = line.indexOf('"', at);
    if (quote < 0) return -1;
    let slashes = 0;
    while (quote - slashes - 1 >= from && line.charCodeAt(quote - slashes - 1) === 92) slashes++;
    if (slashes % 2 === 0) return quote;
    at = quote + 1;
  }
}

/**
 * A series' scheduler (its labels but `stateLabels`, as written) and value, or undefined for a
 * line not shaped as a client writes one: that one is kept as it is, for the parser to judge.
 * Equal keys are equal schedulers for the parser too, so keeping the newest line of a key never
 * loses the newest series of a scheduler.
 */
function seriesOf(line: string, nameEnd: number, state: ReadonlySet<string>): [string, number] | undefined {
  let at = nameEnd;
  let key = '';
  if (line[at] === '{') {
    at++;
    for (;;) {
      while (line[at] === ' ' || line[at] === '\t') at++;
      if (line[at] === '}') {
        at++;
        break;
      }
      LABEL_NAME.lastIndex = at;
      const label = LABEL_NAME.exec(line);
      if (!label) return undefined;
      const end = closingQuote(line, LABEL_NAME.lastIndex);
      if (end < 0) return undefined;
      if (!state.has(label[1] ?? '')) key += `${line.slice(at, end + 1)},`;
      AFTER_VALUE.lastIndex = end + 1;
      const next = AFTER_VALUE.exec(line);
      if (!next) return undefined;
      at = AFTER_VALUE.lastIndex;
      if (next[1] === '}') break;
    }
  }
  const text = line.slice(at).trim().split(/[ \t]/, 1)[0] ?? '';
  const value = text === '' ? Number.NaN : Number(text);
  return Number.isFinite(value) ? [key, value] : undefined;
}

/**
 * Keeps the lines of a `/metrics` body whose metric is one of `wanted`, reading at most
 * `maxBytes` and keeping at most `maxSampleBytes` of them: what is held is those lines and at
 * most one partial line, however large or long the body. Everything else (histograms,
 * comments, other exporters' metrics) is dropped as it streams by, and of `newest`'s families
 * only the newest line of each scheduler is kept (in the place of its first line).
 */
export async function keptLines(
  body: AsyncIterable<Buffer>,
  wanted: ReadonlySet<string>,
  newest: NewestSeries,
  limits: KeptLimits,
  path: string,
): Promise<string> {
  const decoder = new StringDecoder('utf8');
  const kept: string[] = [];
  /** Of each scheduler of a newest-series family: where its line is kept, and its time. */
  const latest = new Map<string, { at: number; value: number }>();
  let keptBytes = 0;
  let bytes = 0;
  let sinceTurn = 0;
  let partial = '';
  let skipping = false;
  /** Keeps `text` in place of the line kept at `at`, or after the others; returns where. */
  const keep = (text: string, at = kept.length): number => {
    keptBytes += Buffer.byteLength(text) - Buffer.byteLength(kept[at] ?? '');
    if (keptBytes > limits.maxSampleBytes)
      throw new KeptTooLarge(
        `${path} has more than ${limits.maxSampleBytes} bytes of engine metrics (signals.maxSampleBytes)`,
      );
    kept[at] = text;
    if (kept.length > MAX_KEPT_LINES)
      throw new KeptTooLarge(`${path} has more than ${MAX_KEPT_LINES} samples of engine metrics`);
    return at;
  };
  const line = (text: string) => {
    const name = METRIC_NAME.exec(text)?.[0];
    if (name === undefined || !wanted.has(name)) return;
    const series = newest.families.has(name) ? seriesOf(text, name.length, newest.stateLabels) : undefined;
    if (!series) {
      keep(text);
      return;
    }
    const [scheduler, value] = series;
    const key = `${name}{${scheduler}`;
    const seen = latest.get(key);
    // The later of two equal times, as the reading takes it; in the place of the scheduler's
    // first line, so that schedulers (and their adapters) are read in the order they were.
    if (seen && value < seen.value) return;
    latest.set(key, { at: keep(text, seen?.at), value });
  };
  const take = (piece: string) => {
    let start = 0;
    for (let nl = piece.indexOf('\n'); nl >= 0; nl = piece.indexOf('\n', start)) {
      if (!skipping) line(partial + piece.slice(start, nl));
      partial = '';
      skipping = false;
      start = nl + 1;
    }
    if (skipping) return;
    partial += piece.slice(start);
    if (partial.length > MAX_LINE_CHARS) {
      partial = '';
      skipping = true;
    }
  };
  for await (const chunk of body) {
    bytes += chunk.length;
    if (bytes > limits.maxBytes) throw new KeptTooLarge(`${path} is larger than ${limits.maxBytes} bytes`);
    take(decoder.write(chunk));
    sinceTurn += chunk.length;
    if (sinceTurn >= TURN_BYTES) {
      sinceTurn = 0;
      await turn();
    }
  }
  take(decoder.end());
  if (!skipping && partial.length > 0) line(partial);
  return kept.join('\n');
}
