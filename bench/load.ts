import { Pool } from 'undici';
import { percentile } from './stats.js';

/**
 * A load generator written on undici (pools, no fetch on the hot path): closed-loop
 * non-streaming requests at a fixed concurrency, and batches of concurrent streams whose
 * every SSE event is timed. Runs in the benchmark's own process.
 */
export interface RequestRun {
  latenciesMs: number[];
  requests: number;
  errors: number;
  seconds: number;
}

/** Two runs of the same load as one (`total` absent: `run` itself). */
export function joinRuns(total: RequestRun | undefined, run: RequestRun): RequestRun {
  if (!total) return run;
  return {
    latenciesMs: total.latenciesMs.concat(run.latenciesMs),
    requests: total.requests + run.requests,
    errors: total.errors + run.errors,
    seconds: total.seconds + run.seconds,
  };
}

export async function closedLoop(
  origin: string,
  path: string,
  body: string,
  concurrency: number,
  seconds: number,
): Promise<RequestRun> {
  const pool = new Pool(origin, { connections: concurrency, pipelining: 1 });
  const latenciesMs: number[] = [];
  let errors = 0;
  const until = performance.now() + seconds * 1000;
  const started = performance.now();
  const loop = async () => {
    while (performance.now() < until) {
      const t0 = performance.now();
      try {
        const res = await pool.request({
          method: 'POST',
          path,
          headers: { 'content-type': 'application/json' },
          body,
        });
        await res.body.arrayBuffer();
        if (res.statusCode !== 200) errors++;
        else latenciesMs.push(performance.now() - t0);
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const elapsed = (performance.now() - started) / 1000;
  await pool.close();
  return { latenciesMs, requests: latenciesMs.length, errors, seconds: elapsed };
}

export interface StreamRun {
  ttftMs: number[];
  interEventMs: number[];
  events: number;
  errors: number;
  seconds: number;
  /** The most streams open (answered 200, not yet ended) at one time. */
  peakOpen: number;
  /** Errors by kind: an HTTP status, or the error code of a request that failed. */
  errorKinds: Record<string, number>;
}

const BLANK_LINE = Buffer.from('\n\n');

/**
 * Opens `count` streams at once and reads them to the end. TTFT is the time to the first
 * event that carries a token (past the opening role/created events); inter-event gaps are
 * measured between consecutive token events of one stream.
 */
export async function streams(
  origin: string,
  path: string,
  body: string,
  count: number,
  firstTokenMarker: string,
): Promise<StreamRun> {
  const pool = new Pool(origin, { connections: count, pipelining: 1 });
  const ttftMs: number[] = [];
  const interEventMs: number[] = [];
  let events = 0;
  let errors = 0;
  let open = 0;
  let peakOpen = 0;
  const errorKinds: Record<string, number> = {};
  const failed = (kind: string) => {
    errors++;
    errorKinds[kind] = (errorKinds[kind] ?? 0) + 1;
  };
  const marker = Buffer.from(firstTokenMarker);
  const started = performance.now();
  const one = async () => {
    const t0 = performance.now();
    let opened = false;
    try {
      const res = await pool.request({
        method: 'POST',
        path,
        headers: { 'content-type': 'application/json' },
        body,
      });
      if (res.statusCode !== 200) {
        failed(String(res.statusCode));
        await res.body.arrayBuffer();
        return;
      }
      opened = true;
      open++;
      if (open > peakOpen) peakOpen = open;
      let last = -1;
      for await (const chunk of res.body) {
        const buf = chunk as Buffer;
        const now = performance.now();
        let at = buf.indexOf(BLANK_LINE);
        let n = 0;
        while (at !== -1) {
          n++;
          at = buf.indexOf(BLANK_LINE, at + 2);
        }
        events += n;
        if (last < 0) {
          if (buf.indexOf(marker) !== -1) {
            ttftMs.push(now - t0);
            last = now;
          }
        } else if (n > 0) {
          interEventMs.push(now - last);
          last = now;
        }
      }
    } catch (err) {
      failed((err as { code?: string }).code ?? 'error');
    } finally {
      if (opened) open--;
    }
  };
  await Promise.all(Array.from({ length: count }, one));
  const seconds = (performance.now() - started) / 1000;
  await pool.close();
  return { ttftMs, interEventMs, events, errors, seconds, peakOpen, errorKinds };
}

export function summarize(values: readonly number[]): { p50: number; p99: number } {
  return { p50: percentile(values, 50), p99: percentile(values, 99) };
}
