/**
 * The stream cases of `npm run bench` (bench/run.ts): many SSE streams through a relay beside
 * going direct to the worker (TTFT and inter-token time added, CPU per event, memory per stream),
 * the rounds of one such case as one, and time to first token under bursts taken in turns.
 */
import { type StreamRun, streams, summarize } from './load.js';
import { cpuSeconds, type Proc, rssBytes } from './processes.js';
import type { BenchReport } from './report.js';
import { percentile, round } from './stats.js';

/** Streams of run.ts's stream case and of each TTFT burst; the most a stream case's warm-up burst opens. */
export const STREAM_COUNT = 256;

export interface StreamResult {
  streams: number;
  ttftAddedMs: { p50: number; p99: number };
  interTokenP99Ms: { direct: number; gateway: number; added: number };
  gatewayCpuSecondsPer1000Events: number;
  eventsPerGatewayCpuSecond: number;
  gatewayRssPerStreamKB: number;
  /** Streams that were open (answered 200 and not yet ended) at the same time, at the peak. */
  peakOpen: number;
  errors: number;
  errorKinds: Record<string, number>;
  events: number;
  cpuSeconds: number;
  rounds?: number;
  eachRound?: {
    eventsPerCpuSecond: number;
    ttftAddedMs: { p50: number; p99: number };
    rssPerStreamKB: number;
  }[];
}

export async function streamCase(
  target: Proc,
  worker: Proc,
  count: number,
  path: string,
  body: string,
  marker: string,
  direct: StreamRun | undefined,
): Promise<{ result: StreamResult; direct: StreamRun }> {
  const workerOrigin = new URL(worker.url).origin;
  const targetOrigin = new URL(target.url).origin;
  const short = body.replace(/"max_(output_)?tokens":\d+/, '"max_$1tokens":10');
  let baseline = direct;
  if (!baseline) {
    // The worker warmed as the relays are (below), so that what a relay adds is not measured
    // against a cold worker's first burst (which made the added TTFT negative).
    await streams(workerOrigin, '/v1/chat/completions', short, Math.min(count, STREAM_COUNT), '"content":" ');
    baseline = await streams(workerOrigin, '/v1/chat/completions', body, count, '"content":" ');
  }
  // A burst of short streams first, alike for every target: a process's first burst runs cold
  // code and opens its upstream connections (measured cold, the gateway's first 256-stream burst
  // had a TTFT p99 of 1,035 ms against the floor's 732; warm, 379 against 256).
  await streams(targetOrigin, path, short, Math.min(count, STREAM_COUNT), marker);
  // Memory per open stream: the peak while the streams are open (sampled every 100 ms) over the
  // process's memory just before (which still holds what earlier cases grew: a lower bound).
  const idleRss = rssBytes(target.pid);
  let peakRss = idleRss;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, rssBytes(target.pid));
  }, 100);
  const cpuBefore = cpuSeconds(target.pid);
  const through = await streams(targetOrigin, path, body, count, marker);
  clearInterval(sampler);
  peakRss = Math.max(peakRss, rssBytes(target.pid));
  const cpu = cpuSeconds(target.pid) - cpuBefore;
  const d = summarize(baseline.ttftMs);
  const g = summarize(through.ttftMs);
  const dItl = summarize(baseline.interEventMs).p99;
  const gItl = summarize(through.interEventMs).p99;
  return {
    direct: baseline,
    result: {
      streams: count,
      ttftAddedMs: { p50: round(g.p50 - d.p50), p99: round(g.p99 - d.p99) },
      interTokenP99Ms: { direct: round(dItl), gateway: round(gItl), added: round(gItl - dItl) },
      gatewayCpuSecondsPer1000Events: round((cpu / through.events) * 1000, 4),
      eventsPerGatewayCpuSecond: Math.round(through.events / cpu),
      gatewayRssPerStreamKB: round((peakRss - idleRss) / count / 1024, 1),
      peakOpen: through.peakOpen,
      errors: through.errors,
      errorKinds: through.errorKinds,
      events: through.events,
      cpuSeconds: round(cpu, 2),
    },
  };
}

/** Rounds of one stream case as one: events per CPU-second over all of them, the means of the rest. */
export function combine(rounds: StreamResult[]): StreamResult {
  const mean = (f: (r: StreamResult) => number) =>
    round(rounds.reduce((sum, r) => sum + f(r), 0) / rounds.length);
  const events = rounds.reduce((sum, r) => sum + r.events, 0);
  const cpu = rounds.reduce((sum, r) => sum + r.cpuSeconds, 0);
  const errorKinds: Record<string, number> = {};
  for (const r of rounds)
    for (const [k, v] of Object.entries(r.errorKinds)) errorKinds[k] = (errorKinds[k] ?? 0) + v;
  return {
    streams: rounds[0]!.streams,
    rounds: rounds.length,
    ttftAddedMs: { p50: mean((r) => r.ttftAddedMs.p50), p99: mean((r) => r.ttftAddedMs.p99) },
    interTokenP99Ms: {
      direct: mean((r) => r.interTokenP99Ms.direct),
      gateway: mean((r) => r.interTokenP99Ms.gateway),
      added: mean((r) => r.interTokenP99Ms.added),
    },
    gatewayCpuSecondsPer1000Events: round((cpu / events) * 1000, 4),
    eventsPerGatewayCpuSecond: Math.round(events / cpu),
    gatewayRssPerStreamKB: mean((r) => r.gatewayRssPerStreamKB),
    peakOpen: Math.max(...rounds.map((r) => r.peakOpen)),
    errors: rounds.reduce((sum, r) => sum + r.errors, 0),
    errorKinds,
    events,
    cpuSeconds: round(cpu, 2),
    eachRound: rounds.map((r) => ({
      eventsPerCpuSecond: r.eventsPerGatewayCpuSecond,
      ttftAddedMs: r.ttftAddedMs,
      rssPerStreamKB: r.gatewayRssPerStreamKB,
    })),
  };
}

/** The time-to-first-token case's result, as the report reads it. */
export type TtftResult = NonNullable<BenchReport['ttft']>;

export async function ttftCase(
  origins: Record<keyof TtftResult['ms'], string>,
  body: string,
  { rounds, tokens }: { rounds: number; tokens: number },
): Promise<TtftResult> {
  const names = Object.keys(origins) as (keyof TtftResult['ms'])[];
  const p50 = Object.fromEntries(names.map((name) => [name, [] as number[]]));
  const p99 = Object.fromEntries(names.map((name) => [name, [] as number[]]));
  let errors = 0;
  for (let n = 0; n < rounds; n++) {
    for (const name of [...names].sort(() => Math.random() - 0.5)) {
      const run = await streams(origins[name], '/v1/chat/completions', body, STREAM_COUNT, '"content":" ');
      const s = summarize(run.ttftMs);
      p50[name]!.push(s.p50);
      p99[name]!.push(s.p99);
      errors += run.errors;
    }
  }
  // The median round: one burst in a dozen is slow for every target alike (the first, often).
  const median = (values: number[]) => percentile(values, 50);
  const ms = Object.fromEntries(
    names.map((name) => [name, { p50: round(median(p50[name]!)), p99: round(median(p99[name]!)) }]),
  ) as TtftResult['ms'];
  const added = (name: keyof TtftResult['ms']) => ({
    p50: round(ms[name].p50 - ms.direct.p50),
    p99: round(ms[name].p99 - ms.direct.p99),
  });
  const addedMs = { floor: added('floor'), dutyFloor: added('dutyFloor'), gateway: added('gateway') };
  return {
    streams: STREAM_COUNT,
    rounds,
    tokens,
    ms,
    addedMs,
    ratio: {
      p50: round(addedMs.gateway.p50 / addedMs.floor.p50, 2),
      p99: round(addedMs.gateway.p99 / addedMs.floor.p99, 2),
    },
    errors,
  };
}
