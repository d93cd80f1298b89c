import { closedLoop, joinRuns, type RequestRun, summarize } from './load.js';
import { cpuSeconds } from './processes.js';
import { round } from './stats.js';

/**
 * Embeddings throughput: closed-loop `POST /v1/embeddings` at a fixed concurrency, direct to the
 * worker, through the gateway and through the floor relay, each relay's CPU per request read from
 * its own process, measured as the non-streaming chat rows are (a warm-up of each, then 1 s slices,
 * the targets taking turns in a new random order each round).
 *
 * The request is what a retrieval pipeline's indexer sends through the openai SDK: a batch of
 * passages, vectors asked for as base64 (the SDK's default), 384 dimensions (a small sentence
 * embedding model's); the mock answers about 33 KB.
 */
export const EMBEDDINGS_INPUTS = 16;
export const EMBEDDINGS_DIMENSIONS = 384;
export const EMBEDDINGS_CONCURRENCY = 64;

export interface EmbeddingsRow {
  concurrency: number;
  inputs: number;
  dimensions: number;
  cpuMicrosPerRequest: { gateway: number; floor: number; ratio: number };
  addedMs: { gateway: { p50: number; p99: number }; floor: { p50: number; p99: number } };
  rps: { direct: number; gateway: number; floor: number };
  errors: number;
}

export function embeddingsBody(model: string): string {
  const input = Array.from(
    { length: EMBEDDINGS_INPUTS },
    (_, i) => `passage ${i}: ${'a sentence of an ordinary document, as an indexer sends it. '.repeat(4)}`,
  );
  return JSON.stringify({ model, input, encoding_format: 'base64', dimensions: EMBEDDINGS_DIMENSIONS });
}

export async function embeddingsCase(
  targets: Record<'direct' | 'gateway' | 'floor', { origin: string; pid: number | undefined }>,
  model: string,
  warmUpSeconds: number,
  seconds: number,
): Promise<EmbeddingsRow> {
  const body = embeddingsBody(model);
  const path = '/v1/embeddings';
  const concurrency = EMBEDDINGS_CONCURRENCY;
  for (const { origin } of Object.values(targets))
    await closedLoop(origin, path, body, concurrency, warmUpSeconds);
  const runs: Record<string, RequestRun> = {};
  const cpu: Record<string, number> = {};
  for (let slice = 0; slice < seconds; slice++) {
    for (const name of Object.keys(targets).sort(() => Math.random() - 0.5)) {
      const { origin, pid } = targets[name as keyof typeof targets];
      const before = pid === undefined ? 0 : cpuSeconds(pid);
      const run = await closedLoop(origin, path, body, concurrency, 1);
      if (pid !== undefined) cpu[name] = (cpu[name] ?? 0) + cpuSeconds(pid) - before;
      runs[name] = joinRuns(runs[name], run);
    }
  }
  const rps = (name: string) => Math.round(runs[name]!.requests / runs[name]!.seconds);
  const micros = (name: string) => round((cpu[name]! / runs[name]!.requests) * 1e6, 1);
  const direct = summarize(runs.direct!.latenciesMs);
  const added = (name: string) => {
    const s = summarize(runs[name]!.latenciesMs);
    return { p50: round(s.p50 - direct.p50), p99: round(s.p99 - direct.p99) };
  };
  return {
    concurrency,
    inputs: EMBEDDINGS_INPUTS,
    dimensions: EMBEDDINGS_DIMENSIONS,
    cpuMicrosPerRequest: {
      gateway: micros('gateway'),
      floor: micros('floor'),
      ratio: round(micros('gateway') / micros('floor'), 2),
    },
    addedMs: { gateway: added('gateway'), floor: added('floor') },
    rps: { direct: rps('direct'), gateway: rps('gateway'), floor: rps('floor') },
    errors: Object.values(runs).reduce((sum, run) => sum + run.errors, 0),
  };
}
