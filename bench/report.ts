/**
 * The benchmark's tables in Markdown, written from a run's JSON (what `npm run bench` prints,
 * and what the README's Performance section shows): `tsx bench/report.ts bench/results/<run>.json`.
 */
import { readFileSync } from 'node:fs';
import type { EmbeddingsRow } from './embeddings-case.js';

interface Stream {
  streams: number;
  ttftAddedMs: { p50: number; p99: number };
  interTokenP99Ms: { direct: number; gateway: number };
  eventsPerGatewayCpuSecond: number;
  gatewayRssPerStreamKB: number;
  peakOpen: number;
  errors: number;
  errorKinds?: Record<string, number>;
  rounds?: number;
  eachRound?: {
    eventsPerCpuSecond: number;
    ttftAddedMs: { p50: number; p99: number };
    rssPerStreamKB: number;
  }[];
}

export interface BenchReport {
  date: string;
  quick: boolean;
  profiled: boolean;
  machine: { cpus: number; model: string; memGiB: number; node: string };
  /** A run of `--only=embeddings` has that case alone; the others are then absent. */
  nonStreaming?: Record<
    string,
    {
      concurrency: number;
      cpuMicrosPerRequest: {
        gateway: number;
        floor: number;
        ratio: number;
        /** Runs before these were measured have none. */
        fastifyFloor?: number;
        checksFloor?: number;
        dutyFloor?: number;
        dutyRatio?: number;
      };
      addedMs: { gateway: { p50: number; p99: number }; floor: { p50: number; p99: number } };
      rps: { direct: number; gateway: number; floor: number };
      errors: number;
    }
  >;
  /** Runs before the embeddings case have none. */
  embeddings?: EmbeddingsRow;
  streamSeconds?: number;
  chatStreams?: Stream;
  floorStreams?: Stream;
  dutyFloorStreams?: Stream;
  responseStreams?: Stream;
  streamRatios?: {
    eventsPerCpuSecond: number;
    eventsPerCpuSecondOfDutyFloor?: number;
    /** Runs before the TTFT case of its own had it here, from the stream rounds. */
    ttftAdded?: { p50: number; p99: number };
  };
  /** Runs before the TTFT case of its own have none. */
  ttft?: {
    streams: number;
    rounds: number;
    tokens: number;
    /** Each target's TTFT p50 / p99 in ms, the median over the rounds. */
    ms: Record<'direct' | 'floor' | 'dutyFloor' | 'gateway', { p50: number; p99: number }>;
    /** What each relay adds to the direct worker's TTFT (medians over the rounds, subtracted). */
    addedMs: Record<'floor' | 'dutyFloor' | 'gateway', { p50: number; p99: number }>;
    /** The gateway's added TTFT over the floor's. */
    ratio: { p50: number; p99: number };
    /** Streams that failed, over all targets and rounds. */
    errors: number;
  };
  burst?: { streams: number; tokens: number; gateway: Stream; floor: Stream };
  cacheAwareDecisionMicros?: { p50: number; p99: number };
  radixLookupMicros?: { p50: number; p99: number };
}

const n = (v: number) => v.toLocaleString('en-US');
/** A figure a run may not have (older runs): a dash. */
const opt = (v: number | undefined, f: (v: number) => string = String) => (v === undefined ? '–' : f(v));

const errorsOf = (s: Stream) => {
  const kinds = Object.entries(s.errorKinds ?? {});
  return kinds.length === 0
    ? String(s.errors)
    : `${s.errors} (${kinds.map(([k, v]) => `${v} × ${k}`).join(', ')})`;
};

export function markdownReport(r: BenchReport): string {
  const lines: string[] = [];
  lines.push(
    `Run ${r.date}${r.quick ? ' (quick)' : ''}${r.profiled ? ' (profiled)' : ''}: ${r.machine.cpus} × ${r.machine.model}, ${r.machine.memGiB} GiB, Node ${r.machine.node.replace(/^v/, '')}.`,
  );
  if (r.nonStreaming) nonStreamingTable(lines, r.nonStreaming);
  if (r.embeddings) embeddingsTable(lines, r.embeddings);
  if (r.chatStreams) streamTables(lines, r);
  return lines.join('\n');
}

function nonStreamingTable(lines: string[], rows: NonNullable<BenchReport['nonStreaming']>): void {
  lines.push(
    '',
    '| non-streaming chat, 1 KB prompt | floor relay | fastify floor | checks floor | duty floor | gateway | gateway / floor | gateway / duty floor |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  );
  for (const row of Object.values(rows)) {
    const c = row.cpuMicrosPerRequest;
    lines.push(
      `| c=${row.concurrency}: relay CPU µs per request | ${c.floor} | ${opt(c.fastifyFloor)} | ${opt(c.checksFloor)} | ${opt(c.dutyFloor)} | ${c.gateway} | ${c.ratio}× | ${opt(c.dutyRatio, (v) => `${v}×`)} |`,
      `| c=${row.concurrency}: latency added p50 / p99 ms | ${row.addedMs.floor.p50} / ${row.addedMs.floor.p99} | | | | ${row.addedMs.gateway.p50} / ${row.addedMs.gateway.p99} | | |`,
      `| c=${row.concurrency}: requests/s (direct ${n(row.rps.direct)}) | ${n(row.rps.floor)} | | | | ${n(row.rps.gateway)} | | |`,
    );
  }
}

function embeddingsTable(lines: string[], e: EmbeddingsRow): void {
  lines.push(
    '',
    `| embeddings: ${e.inputs} inputs a request (base64, ${e.dimensions} dimensions), c=${e.concurrency} | floor relay | gateway | gateway / floor |`,
    '| --- | ---: | ---: | ---: |',
    `| relay CPU µs per request | ${e.cpuMicrosPerRequest.floor} | ${e.cpuMicrosPerRequest.gateway} | ${e.cpuMicrosPerRequest.ratio}× |`,
    `| latency added p50 / p99 ms | ${e.addedMs.floor.p50} / ${e.addedMs.floor.p99} | ${e.addedMs.gateway.p50} / ${e.addedMs.gateway.p99} | |`,
    `| requests/s (direct ${n(e.rps.direct)}) | ${n(e.rps.floor)} | ${n(e.rps.gateway)} | |`,
    `| errors: ${e.errors} | | | |`,
  );
}

/** The stream, TTFT and burst tables (a full run has them all). */
function streamTables(lines: string[], r: BenchReport): void {
  const f = r.floorStreams!;
  const d = r.dutyFloorStreams;
  const c = r.chatStreams!;
  const s = r.responseStreams!;
  const ratios = r.streamRatios!;
  lines.push(
    '',
    `| ${c.streams} streams at 50 events/s for ${r.streamSeconds} s | floor relay | duty floor | chat | gateway / floor | gateway / duty floor | responses |`,
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    `| relayed events per relay CPU-second | ${n(f.eventsPerGatewayCpuSecond)} | ${opt(d?.eventsPerGatewayCpuSecond, n)} | ${n(c.eventsPerGatewayCpuSecond)} | ${ratios.eventsPerCpuSecond} | ${opt(ratios.eventsPerCpuSecondOfDutyFloor)} | ${n(s.eventsPerGatewayCpuSecond)} |`,
    ...(c.eachRound && f.eachRound
      ? [
          `| the same, each round (${c.rounds} each, taking turns) | ${f.eachRound.map((x) => n(x.eventsPerCpuSecond)).join(', ')} | ${d?.eachRound ? d.eachRound.map((x) => n(x.eventsPerCpuSecond)).join(', ') : '–'} | ${c.eachRound.map((x) => n(x.eventsPerCpuSecond)).join(', ')} | | | |`,
        ]
      : []),
    ...(ratios.ttftAdded
      ? [
          `| TTFT added p50 / p99 ms${c.rounds ? ' (mean of the rounds)' : ''} | ${f.ttftAddedMs.p50} / ${f.ttftAddedMs.p99} | ${d ? `${d.ttftAddedMs.p50} / ${d.ttftAddedMs.p99}` : '–'} | ${c.ttftAddedMs.p50} / ${c.ttftAddedMs.p99} | ${ratios.ttftAdded.p50}× / ${ratios.ttftAdded.p99}× | | ${s.ttftAddedMs.p50} / ${s.ttftAddedMs.p99} |`,
        ]
      : []),
    `| inter-token p99 ms (direct ${f.interTokenP99Ms.direct}) | ${f.interTokenP99Ms.gateway} | ${opt(d?.interTokenP99Ms.gateway)} | ${c.interTokenP99Ms.gateway} | | | ${s.interTokenP99Ms.gateway} |`,
    `| KB per open stream | ${f.gatewayRssPerStreamKB} | ${opt(d?.gatewayRssPerStreamKB)} | ${c.gatewayRssPerStreamKB} | | | ${s.gatewayRssPerStreamKB} |`,
    `| errors | ${f.errors} | ${opt(d?.errors)} | ${c.errors} | | | ${s.errors} |`,
  );
  const t = r.ttft;
  if (t) {
    const pair = (v: { p50: number; p99: number }) => `${v.p50} / ${v.p99}`;
    lines.push(
      '',
      `| time to first token: ${t.streams} streams opened at once (${t.tokens} tokens each), ${t.rounds} rounds taking turns | direct | floor relay | duty floor | gateway | gateway / floor |`,
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      `| TTFT p50 / p99 ms (median of the rounds) | ${pair(t.ms.direct)} | ${pair(t.ms.floor)} | ${pair(t.ms.dutyFloor)} | ${pair(t.ms.gateway)} | |`,
      `| added to the direct TTFT, p50 / p99 ms | | ${pair(t.addedMs.floor)} | ${pair(t.addedMs.dutyFloor)} | ${pair(t.addedMs.gateway)} | ${t.ratio.p50}× / ${t.ratio.p99}× |`,
      `| errors (all targets, all rounds): ${t.errors} | | | | | |`,
    );
  }
  const b = r.burst!;
  const decision = r.cacheAwareDecisionMicros!;
  lines.push(
    '',
    `| burst: ${n(b.streams)} chat streams opened at once on one worker (${b.tokens} tokens each) | floor relay | gateway (default limits) |`,
    '| --- | ---: | ---: |',
    `| errors (not held) | ${errorsOf(b.floor)} | ${errorsOf(b.gateway)} |`,
    `| most answered streams open at once | ${n(b.floor.peakOpen)} | ${n(b.gateway.peakOpen)} |`,
    `| KB per stream (peak RSS over idle / ${n(b.streams)}) | ${b.floor.gatewayRssPerStreamKB} | ${b.gateway.gatewayRssPerStreamKB} |`,
    `| relayed events per relay CPU-second | ${n(b.floor.eventsPerGatewayCpuSecond)} | ${n(b.gateway.eventsPerGatewayCpuSecond)} |`,
    '',
    `Cache-aware routing decision, 10k prefixes: p50 ${decision.p50} µs, p99 ${decision.p99} µs.`,
    ...(r.radixLookupMicros
      ? [
          `Radix tree lookup, a 1 KB prompt among 10k: p50 ${r.radixLookupMicros.p50} µs, p99 ${r.radixLookupMicros.p99} µs.`,
        ]
      : []),
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2];
  if (!file) throw new Error('usage: tsx bench/report.ts bench/results/<run>.json');
  console.log(markdownReport(JSON.parse(readFileSync(file, 'utf8')) as BenchReport));
}
