/**
 * `npm run bench`: the gateway against going direct to the worker, measured in one run on
 * loopback. Starts a mock worker and a gateway from the build as separate processes, drives
 * them from this process, prints a table and writes bench/results/<timestamp>.json.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { closedLoop, type RequestRun, type StreamRun, streams, summarize } from './load.js';
import { cpuSeconds, type Proc, rssBytes, startCli, startFloorRelay, stop } from './processes.js';
import { type ProfileSummary, summarizeProfile } from './profile-summary.js';
import { radixLookupMicros, routingDecisionMicros } from './routing-decision.js';
import { round } from './stats.js';

const QUICK = process.argv.includes('--quick');
/** Runs the gateway under `node --cpu-prof` and summarizes where its CPU went (slower: figures are not comparable). */
const PROFILE = process.argv.includes('--profile');
const PROFILE_DIR = new URL('./results/profiles/', import.meta.url).pathname;
const SECONDS = QUICK ? 2 : 5;
/**
 * Before each measured non-streaming run. The gateway's JIT takes thousands of requests to
 * settle: at concurrency 1 its CPU per request still falls by half over the first 20 s.
 */
const WARM_UP_SECONDS = QUICK ? 1 : 5;
const STREAM_TOKENS = QUICK ? 50 : 150; // 3 s per stream at 50 tokens/s
const STREAM_COUNTS = QUICK ? [64, 256] : [256, 1024];

const prompt = 'x'.repeat(1000);
const chat = (model: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model, messages: [{ role: 'user', content: prompt }], ...extra });

interface StreamResult {
  streams: number;
  ttftAddedMs: { p50: number; p99: number };
  interTokenP99Ms: { direct: number; gateway: number; added: number };
  gatewayCpuSecondsPer1000Events: number;
  eventsPerGatewayCpuSecond: number;
  gatewayRssPerStreamKB: number;
  errors: number;
}

async function streamCase(
  gateway: Proc,
  worker: Proc,
  count: number,
  path: string,
  body: string,
  marker: string,
  direct: StreamRun | undefined,
): Promise<{ result: StreamResult; direct: StreamRun }> {
  const workerOrigin = new URL(worker.url).origin;
  const gatewayOrigin = new URL(gateway.url).origin;
  const baseline =
    direct ??
    (await streams(
      workerOrigin,
      '/v1/chat/completions',
      chat('slow', { stream: true, max_tokens: STREAM_TOKENS }),
      count,
      '"content":" ',
    ));
  // Memory per open stream: the peak while the streams are open (sampled every 200 ms) over the
  // relay's memory just before (which still holds what earlier cases grew: a lower bound).
  const idleRss = rssBytes(gateway.pid);
  let peakRss = idleRss;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, rssBytes(gateway.pid));
  }, 200);
  const cpuBefore = cpuSeconds(gateway.pid);
  const viaGateway = await streams(gatewayOrigin, path, body, count, marker);
  clearInterval(sampler);
  const cpu = cpuSeconds(gateway.pid) - cpuBefore;
  const d = summarize(baseline.ttftMs);
  const g = summarize(viaGateway.ttftMs);
  const dItl = summarize(baseline.interEventMs).p99;
  const gItl = summarize(viaGateway.interEventMs).p99;
  return {
    direct: baseline,
    result: {
      streams: count,
      ttftAddedMs: { p50: round(g.p50 - d.p50), p99: round(g.p99 - d.p99) },
      interTokenP99Ms: { direct: round(dItl), gateway: round(gItl), added: round(gItl - dItl) },
      gatewayCpuSecondsPer1000Events: round((cpu / viaGateway.events) * 1000, 4),
      eventsPerGatewayCpuSecond: Math.round(viaGateway.events / cpu),
      gatewayRssPerStreamKB: round((peakRss - idleRss) / count / 1024, 1),
      errors: viaGateway.errors + baseline.errors,
    },
  };
}

async function main(): Promise<void> {
  const started = Date.now();
  const fast = await startCli([
    'mock-worker',
    '--port',
    '0',
    '--model',
    'fast',
    '--tokens-per-second',
    '0',
    '--max-tokens',
    '16',
  ]);
  const slow = await startCli(['mock-worker', '--port', '0', '--model', 'slow', '--tokens-per-second', '50']);
  // The mock workers have no capacity limit: the gateway's per-worker admission (default 256
  // in flight) must not queue the benchmark's 1024 streams, or TTFT would measure the queue.
  const configFile = join(mkdtempSync(join(tmpdir(), 'sluice-bench-')), 'sluice.yaml');
  writeFileSync(
    configFile,
    stringify({
      workerDefaults: { maxConcurrent: 4096, queueSize: 4096 },
      workers: [{ url: fast.url }, { url: slow.url }],
      storage: { kind: 'none' },
      timeouts: { headersMs: 120_000 },
    }),
  );
  const gateway = await startCli(
    ['serve', '--port', '0', '--config', configFile, '--log-level', 'info'],
    {},
    PROFILE ? ['--cpu-prof', '--cpu-prof-dir', PROFILE_DIR] : [],
  );
  const [fastFloor, slowFloor] = await Promise.all([startFloorRelay(fast.url), startFloorRelay(slow.url)]);
  const results: Record<string, unknown> = {};
  try {
    // 1. Non-streaming, 1 KB prompt: direct, through the gateway, and through the floor relay.
    const nonStreaming: Record<string, unknown> = {};
    const targets = {
      direct: new URL(fast.url).origin,
      gateway: new URL(gateway.url).origin,
      floor: new URL(fastFloor.url).origin,
    };
    for (const concurrency of [1, 64]) {
      const body = chat('fast', { max_tokens: 16 });
      const runs: Record<string, RequestRun> = {};
      for (const [name, origin] of Object.entries(targets)) {
        await closedLoop(origin, '/v1/chat/completions', body, concurrency, WARM_UP_SECONDS);
        runs[name] = await closedLoop(origin, '/v1/chat/completions', body, concurrency, SECONDS);
      }
      const rps = (run: RequestRun) => run.requests / run.seconds;
      const d = summarize(runs.direct!.latenciesMs);
      const g = summarize(runs.gateway!.latenciesMs);
      const f = summarize(runs.floor!.latenciesMs);
      nonStreaming[`c${concurrency}`] = {
        concurrency,
        directMs: { p50: round(d.p50), p99: round(d.p99) },
        gatewayMs: { p50: round(g.p50), p99: round(g.p99) },
        addedMs: { p50: round(g.p50 - d.p50), p99: round(g.p99 - d.p99) },
        rps: { direct: Math.round(rps(runs.direct!)), gateway: Math.round(rps(runs.gateway!)) },
        rpsRatio: round(rps(runs.gateway!) / rps(runs.direct!)),
        floor: {
          addedMs: { p50: round(f.p50 - d.p50), p99: round(f.p99 - d.p99) },
          rps: Math.round(rps(runs.floor!)),
          rpsRatio: round(rps(runs.floor!) / rps(runs.direct!)),
        },
        errors: Object.values(runs).reduce((sum, run) => sum + run.errors, 0),
      };
    }
    results.nonStreaming = nonStreaming;

    // 2 and 3. Streams at 50 tokens/s, one SSE event per token: chat completions, then Responses.
    const chatStreams: StreamResult[] = [];
    const responseStreams: StreamResult[] = [];
    const floorStreams: StreamResult[] = [];
    for (const count of STREAM_COUNTS) {
      const chatBody = chat('slow', { stream: true, max_tokens: STREAM_TOKENS });
      const c = await streamCase(
        gateway,
        slow,
        count,
        '/v1/chat/completions',
        chatBody,
        '"content":" ',
        undefined,
      );
      chatStreams.push(c.result);
      const responsesBody = JSON.stringify({
        model: 'slow',
        input: prompt,
        stream: true,
        store: false,
        max_output_tokens: STREAM_TOKENS,
      });
      const r = await streamCase(
        gateway,
        slow,
        count,
        '/v1/responses',
        responsesBody,
        'response.output_text.delta',
        c.direct,
      );
      responseStreams.push(r.result);
      const f = await streamCase(
        slowFloor,
        slow,
        count,
        '/v1/chat/completions',
        chatBody,
        '"content":" ',
        c.direct,
      );
      floorStreams.push(f.result);
    }
    results.floorStreams = floorStreams;
    results.chatStreams = chatStreams;
    results.responseStreams = responseStreams;

    // 4. Routing decision time.
    results.cacheAwareDecisionMicros = Object.fromEntries(
      Object.entries(routingDecisionMicros()).map(([k, v]) => [k, round(v, 2)]),
    );
    results.radixLookupMicros = Object.fromEntries(
      Object.entries(radixLookupMicros()).map(([k, v]) => [k, round(v, 2)]),
    );
  } finally {
    // SIGTERM lets a profiled gateway write its profile.
    await Promise.all([stop(gateway, 'SIGTERM'), ...[fast, slow, fastFloor, slowFloor].map((p) => stop(p))]);
  }
  if (PROFILE) results.gatewayProfile = summarizeProfile(PROFILE_DIR);
  const machine = {
    cpus: cpus().length,
    model: cpus()[0]?.model ?? 'unknown',
    memGiB: round(totalmem() / 2 ** 30, 1),
    node: process.version,
  };
  const report = {
    date: new Date().toISOString(),
    quick: QUICK,
    profiled: PROFILE,
    machine,
    durationSeconds: round((Date.now() - started) / 1000, 1),
    ...results,
  };
  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  const file = new URL(`./results/${report.date.replace(/[:.]/g, '-')}.json`, import.meta.url);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  printTable(report);
  console.log(`\nwritten ${file.pathname}`);
}

function printTable(report: Record<string, unknown>): void {
  const ns = report.nonStreaming as Record<
    string,
    {
      concurrency: number;
      addedMs: { p50: number; p99: number };
      rps: { direct: number; gateway: number };
      rpsRatio: number;
      floor: { addedMs: { p50: number; p99: number }; rps: number; rpsRatio: number };
    }
  >;
  console.log(`sluice bench ${report.date} (${JSON.stringify(report.machine)})`);
  console.log(
    '\nnon-streaming chat, 1 KB prompt      added p50 ms  added p99 ms  rps direct  rps gateway  ratio',
  );
  for (const row of Object.values(ns)) {
    console.log(
      `  concurrency ${String(row.concurrency).padEnd(24)}${String(row.addedMs.p50).padStart(12)}${String(row.addedMs.p99).padStart(14)}${String(row.rps.direct).padStart(12)}${String(row.rps.gateway).padStart(13)}${String(row.rpsRatio).padStart(7)}`,
    );
    console.log(
      `    floor relay${' '.repeat(25)}${String(row.floor.addedMs.p50).padStart(12)}${String(row.floor.addedMs.p99).padStart(14)}${String(row.rps.direct).padStart(12)}${String(row.floor.rps).padStart(13)}${String(row.floor.rpsRatio).padStart(7)}`,
    );
  }
  for (const [name, rows] of [
    ['chat streams', report.chatStreams],
    ['responses streams', report.responseStreams],
    ['floor relay streams', report.floorStreams],
  ] as const) {
    console.log(
      `\n${name} @50 tok/s   TTFT added p50/p99 ms   ITL p99 direct/gateway ms   events/CPU-s   CPU s/1000 ev   KB/stream  errors`,
    );
    for (const row of rows as StreamResult[]) {
      console.log(
        `  ${String(row.streams).padEnd(20)}${`${row.ttftAddedMs.p50} / ${row.ttftAddedMs.p99}`.padStart(22)}${`${row.interTokenP99Ms.direct} / ${row.interTokenP99Ms.gateway}`.padStart(28)}${String(row.eventsPerGatewayCpuSecond).padStart(15)}${String(row.gatewayCpuSecondsPer1000Events).padStart(16)}${String(row.gatewayRssPerStreamKB).padStart(11)}${String(row.errors).padStart(8)}`,
      );
    }
  }
  const routing = report.cacheAwareDecisionMicros as { p50: number; p99: number };
  console.log(`\ncache_aware decision, 10k prefixes: p50 ${routing.p50} µs, p99 ${routing.p99} µs`);
  const lookup = report.radixLookupMicros as { p50: number; p99: number };
  console.log(`radix tree lookup, 1 KB among 10k prompts: p50 ${lookup.p50} µs, p99 ${lookup.p99} µs`);
  const profile = report.gatewayProfile as ProfileSummary | undefined;
  if (profile) {
    console.log(`\ngateway CPU profile (${profile.busyMs} ms on CPU; ${profile.file}), % of busy time:`);
    console.log(
      `  by area: ${Object.entries(profile.byArea)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
    );
    for (const { fn, share } of profile.topFunctions) console.log(`  ${String(share).padStart(5)}  ${fn}`);
    console.log('  (figures of a profiled run are slowed by the profiler: compare them with care)');
  }
}

await main();
