/**
 * The routing benchmark (issue 32): every routing policy, through one and two gateway replicas
 * (a round-robin load balancer in front of them: the client alternates), in front of a fleet of
 * simulated engines (the mock's engine model: batching, queues, a paged prefix cache, vLLM's
 * /metrics), on four workloads (see routing-workloads.ts). Per cell: TTFT p50/p90/p99, output
 * tokens/s, the engines' prefix-cache hit rate (from their /metrics), the share of a session's
 * turns that stayed on the engine of its previous turn, batch use and queues, and the small
 * tenants' TTFT p99 beside the hot tenant and alone. Prints tables, writes
 * bench/results/routing-<date>.json.
 *
 *   npx tsx bench/routing.ts [--quick] [--policies round_robin,least_outstanding,cache_aware,scorer]
 *     [--replicas 1,2] [--workloads chat,agent,short,tenants,tenants-alone] [--load 0.85]
 *     [--seconds 24] [--warmup 2] [--drain 6] [--engines 8] [--seed 1] [--engine '{"maxBatch":16}']
 *     [--gateway-config extra.yaml] [--tenant-header x-tenant-id] [--dump requests.jsonl]
 *   npm run bench -- routing [same flags]
 *
 * The gateways run from the sources (`node --import tsx src/cli/main.ts serve`), or from the
 * build named by SLUICE_BENCH_CLI. Run it from the repository's root. It is a benchmark, not a
 * test: its figures depend on the machine, which the engines, gateways and clients share.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { stringify } from 'yaml';
import { resolveEngineOptions } from '../src/mock/engine-options.js';
import { cpuSeconds, type Proc, startNode, stop } from './processes.js';
import { type Args, parseArgs } from './routing-args.js';
import { type CellRun, runCell } from './routing-client.js';
import {
  type EngineSample,
  type EngineTraces,
  engineTtfts,
  idle,
  lateness,
  scrapeAll,
  sum,
} from './routing-engines.js';
import type { FleetSpec } from './routing-fleet.js';
import { type CellResult, markdownReport, type RoutingReport } from './routing-report.js';
import { makeWorkload, type WorkloadName } from './routing-workloads.js';
import { percentile, round } from './stats.js';

const ROOT = new URL('..', import.meta.url).pathname;

interface Cell {
  workload: WorkloadName;
  policy: string;
  replicas: number;
  model: string;
}

function summarize(
  cell: Cell,
  args: Args,
  run: CellRun,
  window: { before: EngineSample[]; after: EngineSample[]; during: EngineSample[][] },
  offeredRps: number,
  capacityRps: number,
  machine: CellResult['machine'],
  traces: EngineTraces,
): CellResult {
  const engineTtft = traces.ttfts;
  // A burst is sent at the start: all of it is measured.
  const from = cell.workload === 'burst' ? 0 : args.warmup * 1000;
  const to = args.seconds * 1000;
  const measured = run.requests.filter((r) => r.sentMs >= from && r.sentMs < to);
  const outcomes: Record<string, number> = {};
  for (const r of measured) outcomes[r.outcome] = (outcomes[r.outcome] ?? 0) + 1;
  // A request cut before its first token waited at least until the cut.
  const ttfts = (rs: typeof measured) =>
    rs.flatMap((r) =>
      r.ttftMs !== undefined ? [r.ttftMs] : r.outcome === 'cut' ? [run.durationMs - r.sentMs] : [],
    );
  const all = ttfts(measured);
  const atEngines = measured.flatMap((r) => {
    const ms = engineTtft.get(r.traceId);
    return ms === undefined ? [] : [ms];
  });
  const queries = sum(window.after, (s) => s.queries) - sum(window.before, (s) => s.queries);
  const hits = sum(window.after, (s) => s.hits) - sum(window.before, (s) => s.hits);
  // Consecutive turns of a session, the first of them served.
  const byTurn = new Map(run.requests.map((r) => [`${r.session}:${r.turn}`, r] as const));
  let pairs = 0;
  let same = 0;
  for (const r of run.requests) {
    const previous = byTurn.get(`${r.session}:${r.turn - 1}`);
    if (previous?.outcome !== 'ok' || r.worker === undefined) continue;
    pairs++;
    if (r.worker === previous.worker) same++;
  }
  const slots = args.engines * (args.engine.maxBatch ?? 1);
  const use = window.during.map((samples) => sum(samples, (s) => s.running) / slots);
  const waiting = window.during.map((samples) => sum(samples, (s) => s.waiting));
  const result: CellResult = {
    ...cell,
    offeredRps: round(offeredRps, 2),
    capacityRps: round(capacityRps, 2),
    requests: measured.length,
    outcomes,
    ttftMs: {
      p50: round(percentile(all, 50), 1),
      p90: round(percentile(all, 90), 1),
      p99: round(percentile(all, 99), 1),
    },
    engineTtftMs: {
      p50: round(percentile(atEngines, 50), 1),
      p90: round(percentile(atEngines, 90), 1),
      p99: round(percentile(atEngines, 99), 1),
    },
    outputTokensPerSecond: round(
      run.tokenTimesMs.filter((t) => t >= from && t < to).length / (args.seconds - args.warmup),
      1,
    ),
    prefixHitRate: queries > 0 ? round(hits / queries, 4) : null,
    sameEngineRate: pairs > 0 ? round(same / pairs, 4) : null,
    batchUse: round(use.reduce((a, b) => a + b, 0) / Math.max(1, use.length), 4),
    waiting: {
      mean: round(waiting.reduce((a, b) => a + b, 0) / Math.max(1, waiting.length), 1),
      max: Math.max(0, ...waiting),
    },
    machine,
  };
  if (cell.workload === 'burst') result.enginePeaks = traces.peaks;
  if (cell.workload === 'tenants' || cell.workload === 'tenants-alone') {
    const small = measured.filter((r) => !r.hot);
    result.smallTenantsTtftP99Ms = round(percentile(ttfts(small), 99), 1);
    result.smallTenantsEngineTtftP99Ms = round(
      percentile(
        small.flatMap((r) => {
          const ms = engineTtft.get(r.traceId);
          return ms === undefined ? [] : [ms];
        }),
        99,
      ),
      1,
    );
    if (cell.workload === 'tenants')
      result.hotTenantTtftP99Ms = round(percentile(ttfts(measured.filter((r) => r.hot)), 99), 1);
  }
  return result;
}

async function main(): Promise<void> {
  const started = Date.now();
  const args = parseArgs(process.argv.slice(2));
  const engine = resolveEngineOptions(args.engine);
  const cells: Cell[] = [];
  for (const workload of args.workloads) {
    for (const replicas of args.replicas) {
      for (const policy of args.policies)
        cells.push({ workload, policy, replicas, model: `${workload}.${policy}.r${replicas}` });
    }
  }
  const models = ['warmup', ...cells.map((c) => c.model)];
  const fleetSpec: FleetSpec = { count: args.engines, models, engine: args.engine };
  const fleet = await startNode(
    ['--import', 'tsx', join(ROOT, 'bench/routing-fleet.ts'), JSON.stringify(fleetSpec)],
    {},
    { cwd: ROOT, timeoutMs: 30_000 },
  );
  const engineUrls = fleet.line.urls!;
  const dir = mkdtempSync(join(tmpdir(), 'sluice-routing-'));
  const configFile = join(dir, 'sluice.yaml');
  const extra = args.gatewayConfig;
  writeFileSync(
    configFile,
    stringify({
      ...extra,
      // What replicas share through Redis (the scorer's affinity, flow control's counts) is this
      // run's alone: a key prefix of its own, so a run never starts from an earlier run's
      // decisions for the same model names on engines whose caches were emptied since.
      ...(extra.redis
        ? {
            redis: {
              ...(extra.redis as object),
              keyPrefix: `${(extra.redis as { keyPrefix?: string }).keyPrefix ?? 'sluice:'}bench-${process.pid}-${Date.now()}:`,
            },
          }
        : {}),
      storage: { kind: 'none' },
      // The engines keep each request's times under the benchmark's trace id.
      server: {
        ...(extra.server as object | undefined),
        forwardHeaders: [
          'traceparent',
          'x-mock-trace-id',
          ...(((extra.server as { forwardHeaders?: string[] } | undefined)?.forwardHeaders ??
            []) as string[]),
        ],
      },
      // The replicas say where they listen at info.
      log: { ...(extra.log as object | undefined), level: 'info' },
      routing: { policy: 'least_outstanding', ...(extra.routing as object | undefined) },
      workers: engineUrls.map((url, i) => ({
        url,
        id: `engine-${i}`,
        models,
        schedulingPolicy: engine.schedulingPolicy,
        ...(args.workerBatch ? { maxBatch: engine.maxBatch } : {}),
      })),
      models: {
        ...(extra.models as object | undefined),
        ...Object.fromEntries(cells.map((c) => [c.model, { policy: c.policy }])),
      },
    }),
  );
  const cli = process.env.SLUICE_BENCH_CLI;
  const serve = ['serve', '--port', '0', '--config', configFile];
  const gatewayCount = Math.max(...args.replicas);
  const gateways: Proc[] = [];
  try {
    const starts = await Promise.allSettled(
      Array.from({ length: gatewayCount }, () =>
        startNode(
          cli ? [cli, ...serve] : ['--import', 'tsx', join(ROOT, 'src/cli/main.ts'), ...serve],
          {},
          { cwd: ROOT, timeoutMs: 30_000 },
        ),
      ),
    );
    for (const start of starts) if (start.status === 'fulfilled') gateways.push(start.value);
    const failed = starts.find((start) => start.status === 'rejected');
    if (failed) throw failed.reason;
    const origins = gateways.map((g) => new URL(g.url).origin);
    const settings = (seconds: number, load: number) => ({
      engines: args.engines,
      engine,
      load,
      seconds,
      seed: args.seed,
    });
    // A warm-up through every replica: the gateways' JIT, their connections to every engine.
    await runCell({
      replicas: origins,
      model: 'warmup',
      workload: makeWorkload('short', settings(2, 0.3)),
      seconds: 2,
      drainSeconds: 5,
      tenantHeader: args.tenantHeader,
    });
    const results: CellResult[] = [];
    for (const cell of cells) {
      await idle(engineUrls);
      for (const url of engineUrls) await fetch(`${url}/reset_prefix_cache`, { method: 'POST' });
      const workload = makeWorkload(cell.workload, settings(args.seconds, args.load));
      const window: { before: EngineSample[]; after: EngineSample[]; during: EngineSample[][] } = {
        before: [],
        after: [],
        during: [],
      };
      await engineTtfts(engineUrls); // forget what an earlier cell left
      const lateBefore = await lateness(engineUrls);
      const cpuBefore = {
        gateways: gateways.map((g) => cpuSeconds(g.pid)),
        engines: cpuSeconds(fleet.pid),
        clients: process.cpuUsage(),
      };
      const loopDelay = monitorEventLoopDelay({ resolution: 10 });
      loopDelay.enable();
      const t0 = performance.now();
      const sampling = (async () => {
        let next = 250;
        while (next < args.seconds * 1000) {
          await new Promise((resolve) => setTimeout(resolve, Math.max(0, t0 + next - performance.now())));
          const samples = await scrapeAll(engineUrls);
          const at = performance.now() - t0;
          if (window.before.length === 0 && at >= args.warmup * 1000) window.before = samples;
          if (at >= args.warmup * 1000) window.during.push(samples);
          next += 250;
        }
        window.after = await scrapeAll(engineUrls);
        if (window.before.length === 0) window.before = window.after;
      })();
      const run = await runCell({
        replicas: origins.slice(0, cell.replicas),
        model: cell.model,
        workload,
        seconds: args.seconds,
        drainSeconds: args.drain,
        tenantHeader: args.tenantHeader,
      });
      await sampling;
      loopDelay.disable();
      const seconds = (performance.now() - t0) / 1000;
      const lateAfter = await lateness(engineUrls);
      const steps = lateAfter.reduce((n, l, i) => n + l.steps - lateBefore[i]!.steps, 0);
      const lateMs = lateAfter.reduce((n, l, i) => n + l.totalMs - lateBefore[i]!.totalMs, 0);
      const clientCpu = process.cpuUsage(cpuBefore.clients);
      const machine: CellResult['machine'] = {
        cpuCores: {
          gateways: gateways.map((g, i) => round((cpuSeconds(g.pid) - cpuBefore.gateways[i]!) / seconds, 2)),
          engines: round((cpuSeconds(fleet.pid) - cpuBefore.engines) / seconds, 2),
          clients: round((clientCpu.user + clientCpu.system) / 1e6 / seconds, 2),
        },
        engineLateness: {
          meanMs: round(lateMs / Math.max(1, steps), 2),
          over5ms: round(
            lateAfter.reduce((n, l, i) => n + l.over5ms - lateBefore[i]!.over5ms, 0) / Math.max(1, steps),
            4,
          ),
        },
        clientLoopDelayP99Ms: round(loopDelay.percentile(99) / 1e6, 1),
      };
      const result = summarize(
        cell,
        args,
        run,
        window,
        workload.requestRate,
        workload.capacity,
        machine,
        await engineTtfts(engineUrls, args.dump),
      );
      results.push(result);
      console.error(
        `${cell.workload} ${cell.policy} r${cell.replicas}: TTFT p50/p90/p99 ${result.ttftMs.p50}/${result.ttftMs.p90}/${result.ttftMs.p99} ms, hits ${result.prefixHitRate}, same engine ${result.sameEngineRate}, batch use ${result.batchUse}, waiting ${result.waiting.mean}, ${JSON.stringify(result.outcomes)}`,
      );
    }
    const report: RoutingReport = {
      date: new Date().toISOString(),
      quick: args.quick,
      machine: { cpus: cpus().length, model: cpus()[0]?.model ?? 'unknown', node: process.version },
      command: `npx tsx bench/routing.ts ${process.argv.slice(2).join(' ')}`.trim(),
      settings: {
        engines: args.engines,
        engine: { ...engine },
        load: args.load,
        seconds: args.seconds,
        warmupSeconds: args.warmup,
        drainSeconds: args.drain,
        seed: args.seed,
        policies: args.policies,
        replicas: args.replicas,
        workloads: args.workloads,
      },
      durationSeconds: round((Date.now() - started) / 1000, 1),
      cells: results,
    };
    mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
    const file = new URL(`./results/routing-${report.date.replace(/[:.]/g, '-')}.json`, import.meta.url);
    writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
    console.log(markdownReport(report));
    console.log(`\nwritten ${file.pathname}`);
  } finally {
    await Promise.all([...gateways, fleet].map((p) => stop(p)));
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
