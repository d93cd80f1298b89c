/**
 * `npm run bench`: the gateway against going direct to the worker, measured in one run on
 * loopback (`npm run bench -- routing` runs the routing benchmark, bench/routing.ts, instead). Starts a mock worker and a gateway from the build as separate processes, drives
 * them from this process, prints a table and writes bench/results/<timestamp>.json.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { embeddingsCase } from './embeddings-case.js';
import { closedLoop, joinRuns, type RequestRun, type StreamRun, streams, summarize } from './load.js';
import { cpuSeconds, type Proc, startCli, startFloorRelay, stop } from './processes.js';
import { type ProfileSummary, summarizeProfile } from './profile-summary.js';
import { type BenchReport, markdownReport } from './report.js';
import { radixLookupMicros, routingDecisionMicros } from './routing-decision.js';
import { round } from './stats.js';
import { combine, STREAM_COUNT, type StreamResult, streamCase, ttftCase } from './stream-cases.js';

const QUICK = process.argv.includes('--quick');
/** `--only=embeddings`: that case alone (its one row), for a quick look at it. */
const ONLY = process.argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length);
/** The benchmarks run.ts hands over to, each with its own flags (`--only=` among them). */
const OTHER_BENCH = process.argv[2] === 'routing' || process.argv[2] === 'hostile';
if (!OTHER_BENCH && ONLY !== undefined && ONLY !== 'embeddings')
  throw new Error(`--only=${ONLY}: only --only=embeddings is known`);
/** Runs the gateway under `node --cpu-prof` and summarizes where its CPU went (slower: figures are not comparable). */
const PROFILE = process.argv.includes('--profile');
/** One directory per run: the summary reads the largest profile in it. */
const PROFILE_DIR = new URL(`./results/profiles/${Date.now()}/`, import.meta.url).pathname;
/** Measured seconds of each non-streaming target (1 s slices, taking turns). */
const SECONDS = QUICK ? 4 : 8;
/**
 * Before each measured non-streaming run. The gateway's JIT takes thousands of requests to
 * settle: at concurrency 1 its CPU per request still falls by half over the first 20 s.
 */
const WARM_UP_SECONDS = QUICK ? 2 : 5;
/** Long enough (>= 10 s at 50 tokens/s) that opening the streams does not dominate, quick or not. */
const STREAM_TOKENS = QUICK ? 500 : 750;
/** Rounds of the 256-stream case through each of the gateway, the floor relay and the duty floor, taking turns. */
const STREAM_ROUNDS = QUICK ? 1 : 3;
/** The burst: this many streams opened at once on one worker, through the default admission limits. */
const BURST_STREAMS = 2000;
const BURST_TOKENS = 100;
/**
 * Time to first token under a burst: rounds of 256 short streams opened at once, the direct
 * worker and every relay taking turns in a new random order each round. A baseline measured once
 * beside relays measured minutes later made the floor's added TTFT anything from -10 to +40 ms
 * (one burst's p50 on the worker alone moves between 20 and 70 ms on this machine).
 */
const TTFT_ROUNDS = QUICK ? 4 : 16;
const TTFT_TOKENS = 20;

const prompt = 'x'.repeat(1000);
const chat = (model: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model, messages: [{ role: 'user', content: prompt }], ...extra });

interface NonStreamingRow {
  concurrency: number;
  /** CPU of each relay's own process per request, from /proc/<pid>/stat. */
  cpuMicrosPerRequest: {
    gateway: number;
    floor: number;
    ratio: number;
    /** The floor relay served through fastify. */
    fastifyFloor: number;
    /** The floor relay parsing the request's and the whole answer's JSON, without metrics or a log line. */
    checksFloor: number;
    /** The floor relay with the duties of any gateway (JSON in and out parsed, counted, logged). */
    dutyFloor: number;
    dutyRatio: number;
  };
  addedMs: { gateway: { p50: number; p99: number }; floor: { p50: number; p99: number } };
  rps: { direct: number; gateway: number; floor: number };
  errors: number;
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
  // The gateway runs with the default admission limits (per worker: 256 in flight, the rest
  // queued): the 256-stream case fits in them; the burst case is queued by them.
  const configFile = join(mkdtempSync(join(tmpdir(), 'sluice-bench-')), 'sluice.yaml');
  writeFileSync(
    configFile,
    stringify({
      workers: [{ url: fast.url }, { url: slow.url }],
      storage: { kind: 'none' },
    }),
  );
  const serveArgs = ['serve', '--port', '0', '--config', configFile, '--log-level', 'info'];
  const gateway = await startCli(serveArgs, {}, PROFILE ? ['--cpu-prof', '--cpu-prof-dir', PROFILE_DIR] : []);
  const [fastFloor, slowFloor, fastFastify, fastChecks, fastDuties, slowDuties] = await Promise.all([
    startFloorRelay(fast.url),
    startFloorRelay(slow.url),
    startFloorRelay(fast.url, [], 'fastify'),
    startFloorRelay(fast.url, [], 'checks'),
    startFloorRelay(fast.url, [], 'duties'),
    startFloorRelay(slow.url, [], 'duties'),
  ]);
  const results: Record<string, unknown> = {};
  try {
    if (ONLY === undefined) {
      // 1. Non-streaming, 1 KB prompt: direct, through the gateway, and through the floor relay,
      // each relay's CPU per request read from its own process.
      const nonStreaming: Record<string, NonStreamingRow> = {};
      const targets: Record<string, { origin: string; pid: number | undefined }> = {
        direct: { origin: new URL(fast.url).origin, pid: undefined },
        gateway: { origin: new URL(gateway.url).origin, pid: gateway.pid },
        floor: { origin: new URL(fastFloor.url).origin, pid: fastFloor.pid },
        fastifyFloor: { origin: new URL(fastFastify.url).origin, pid: fastFastify.pid },
        checksFloor: { origin: new URL(fastChecks.url).origin, pid: fastChecks.pid },
        dutyFloor: { origin: new URL(fastDuties.url).origin, pid: fastDuties.pid },
      };
      for (const concurrency of [1, 64]) {
        const body = chat('fast', { max_tokens: 16 });
        const runs: Record<string, RequestRun> = {};
        const cpu: Record<string, number> = {};
        for (const { origin } of Object.values(targets)) {
          await closedLoop(origin, '/v1/chat/completions', body, concurrency, WARM_UP_SECONDS);
        }
        // Measured in 1 s slices, the targets taking turns in a new random order each round, so
        // that the drift of a shared machine's load weighs on all of them alike.
        for (let slice = 0; slice < SECONDS; slice++) {
          const order = Object.keys(targets).sort(() => Math.random() - 0.5);
          for (const name of order) {
            const { origin, pid } = targets[name]!;
            const before = pid === undefined ? 0 : cpuSeconds(pid);
            const run = await closedLoop(origin, '/v1/chat/completions', body, concurrency, 1);
            if (pid !== undefined) cpu[name] = (cpu[name] ?? 0) + cpuSeconds(pid) - before;
            runs[name] = joinRuns(runs[name], run);
          }
        }
        const rps = (run: RequestRun) => Math.round(run.requests / run.seconds);
        const micros = (name: string) => round((cpu[name]! / runs[name]!.requests) * 1e6, 1);
        const d = summarize(runs.direct!.latenciesMs);
        const added = (name: string) => {
          const s = summarize(runs[name]!.latenciesMs);
          return { p50: round(s.p50 - d.p50), p99: round(s.p99 - d.p99) };
        };
        nonStreaming[`c${concurrency}`] = {
          concurrency,
          cpuMicrosPerRequest: {
            gateway: micros('gateway'),
            floor: micros('floor'),
            ratio: round(micros('gateway') / micros('floor'), 2),
            fastifyFloor: micros('fastifyFloor'),
            checksFloor: micros('checksFloor'),
            dutyFloor: micros('dutyFloor'),
            dutyRatio: round(micros('gateway') / micros('dutyFloor'), 2),
          },
          addedMs: { gateway: added('gateway'), floor: added('floor') },
          rps: { direct: rps(runs.direct!), gateway: rps(runs.gateway!), floor: rps(runs.floor!) },
          errors: Object.values(runs).reduce((sum, run) => sum + run.errors, 0),
        };
      }
      results.nonStreaming = nonStreaming;
    }

    // 1b. Embeddings throughput: a batch of passages a request, as the chat rows are measured.
    if (ONLY === undefined || ONLY === 'embeddings') {
      results.embeddings = await embeddingsCase(
        {
          direct: { origin: new URL(fast.url).origin, pid: undefined },
          gateway: { origin: new URL(gateway.url).origin, pid: gateway.pid },
          floor: { origin: new URL(fastFloor.url).origin, pid: fastFloor.pid },
        },
        'fast',
        WARM_UP_SECONDS,
        SECONDS,
      );
    }

    if (ONLY === undefined) {
      // 2. Streams at 50 tokens/s, one SSE event per token: direct, chat completions through the
      // gateway and the floor relay, and Responses through the gateway.
      const chatBody = chat('slow', { stream: true, max_tokens: STREAM_TOKENS });
      // The gateway, the floor relay and the duty floor take turns (STREAM_ROUNDS each), so that a
      // shared machine's load, which drifts over a run, weighs on all of them alike. Not at the same
      // time: three relays of 256 streams each saturate this 2-vCPU machine (inter-token p99 95 ms
      // against the worker's 23), and the gateway's events per CPU-second came out 22% above the
      // day's runs taking turns, the floor's 8% (2026-12-03; likely a relay kept waiting for the
      // CPU reads several events at once, which costs the gateway less per event).
      let direct: StreamRun | undefined;
      const relays = { chat: gateway, floor: slowFloor, duties: slowDuties };
      const rounds: Record<keyof typeof relays, StreamResult[]> = { chat: [], floor: [], duties: [] };
      for (let n = 0; n < STREAM_ROUNDS; n++) {
        for (const [name, relay] of Object.entries(relays) as [keyof typeof relays, Proc][]) {
          const run = await streamCase(
            relay,
            slow,
            STREAM_COUNT,
            '/v1/chat/completions',
            chatBody,
            '"content":" ',
            direct,
          );
          direct = run.direct;
          rounds[name].push(run.result);
        }
      }
      const c = { result: combine(rounds.chat), direct: direct! };
      const f = { result: combine(rounds.floor) };
      const du = combine(rounds.duties);
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
        STREAM_COUNT,
        '/v1/responses',
        responsesBody,
        'response.output_text.delta',
        c.direct,
      );
      results.streamSeconds = STREAM_TOKENS / 50;
      results.floorStreams = f.result;
      results.dutyFloorStreams = du;
      results.chatStreams = c.result;
      results.responseStreams = r.result;
      results.streamRatios = {
        eventsPerCpuSecond: round(c.result.eventsPerGatewayCpuSecond / f.result.eventsPerGatewayCpuSecond, 2),
        eventsPerCpuSecondOfDutyFloor: round(
          c.result.eventsPerGatewayCpuSecond / du.eventsPerGatewayCpuSecond,
          2,
        ),
      };

      // 3. Time to first token under a burst of 256 streams, in rounds taking turns (the relays
      // are warm: the stream rounds above ran through them).
      results.ttft = await ttftCase(
        {
          direct: new URL(slow.url).origin,
          floor: new URL(slowFloor.url).origin,
          dutyFloor: new URL(slowDuties.url).origin,
          gateway: new URL(gateway.url).origin,
        },
        chat('slow', { stream: true, max_tokens: TTFT_TOKENS }),
        { rounds: TTFT_ROUNDS, tokens: TTFT_TOKENS },
      );

      // 4. The burst: 2,000 chat streams opened at once on the one slow worker.
      const burstBody = chat('slow', { stream: true, max_tokens: BURST_TOKENS });
      const burstDirect = await streams(
        new URL(slow.url).origin,
        '/v1/chat/completions',
        burstBody,
        BURST_STREAMS,
        '"content":" ',
      );
      // Each in a process of its own, started for it: memory per stream is the peak over the
      // process's memory just before, and a process that ran the cases above keeps what they grew
      // (a run measured 0 KB per stream so).
      const burstCase = async (start: () => Promise<Proc>) => {
        const relay = await start();
        try {
          return (
            await streamCase(
              relay,
              slow,
              BURST_STREAMS,
              '/v1/chat/completions',
              burstBody,
              '"content":" ',
              burstDirect,
            )
          ).result;
        } finally {
          await stop(relay);
        }
      };
      const bg = await burstCase(() => startCli(serveArgs));
      const bf = await burstCase(() => startFloorRelay(slow.url));
      results.burst = { streams: BURST_STREAMS, tokens: BURST_TOKENS, gateway: bg, floor: bf };

      // 5. Routing decision time.
      results.cacheAwareDecisionMicros = Object.fromEntries(
        Object.entries(routingDecisionMicros()).map(([k, v]) => [k, round(v, 2)]),
      );
      results.radixLookupMicros = Object.fromEntries(
        Object.entries(radixLookupMicros()).map(([k, v]) => [k, round(v, 2)]),
      );
    }
  } finally {
    // SIGTERM lets a profiled gateway write its profile.
    await Promise.all([
      stop(gateway, 'SIGTERM'),
      ...[fast, slow, fastFloor, slowFloor, fastFastify, fastChecks, fastDuties, slowDuties].map((p) =>
        stop(p),
      ),
    ]);
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
  console.log(markdownReport(report as unknown as BenchReport));
  const profile = results.gatewayProfile as ProfileSummary | undefined;
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
  console.log(`\nwritten ${file.pathname}`);
}

// `npm run bench -- routing ...`: the routing benchmark (bench/routing.ts) instead.
if (process.argv[2] === 'routing') await import('./routing.js');
// `npm run bench -- hostile`: issue 48's worst cases at once on a 1 GB heap (bench/hostile.ts).
else if (process.argv[2] === 'hostile') await import('./hostile.js');
else await main();
