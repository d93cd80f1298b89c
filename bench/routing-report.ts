/**
 * The routing benchmark's tables in Markdown, from a run's JSON (what `bench/routing.ts` prints):
 * `tsx bench/routing-report.ts bench/results/routing-<date>.json`.
 */
import { readFileSync } from 'node:fs';

export interface CellResult {
  workload: string;
  policy: string;
  replicas: number;
  model: string;
  /** Offered requests per second, and the fleet's batched capacity for the workload. */
  offeredRps: number;
  capacityRps: number;
  /** Requests sent in the measured window, and how many of them ended each way. */
  requests: number;
  outcomes: Record<string, number>;
  /** Time to first token in ms (a request cut before its first token counts the time it waited). */
  ttftMs: { p50: number; p90: number; p99: number };
  /**
   * The same requests' time to first token on the engines' clock: from the request's arrival at
   * the engine to its first token (queue and prefill), free of what the machine's load added to
   * the way there and back (but blind to any wait before the engine, in the gateway).
   */
  engineTtftMs: { p50: number; p90: number; p99: number };
  outputTokensPerSecond: number;
  /** The engines' prefix-cache hits over queries in the window, from their /metrics; null when none was queried. */
  prefixHitRate: number | null;
  /** Of the turns whose session's previous turn was served, the share served by the same engine; null for single-turn workloads. */
  sameEngineRate: number | null;
  /** The engines' running requests over their batch slots, and their waiting requests (all engines), sampled in the window. */
  batchUse: number;
  waiting: { mean: number; max: number };
  /** TTFT p99 of the small tenants' and of the hot tenant's requests (workloads with tenants). */
  smallTenantsTtftP99Ms?: number;
  hotTenantTtftP99Ms?: number;
  /** Per engine, the most requests it held at once, running and waiting (workload `burst`). */
  enginePeaks?: number[];
  /** The small tenants' TTFT p99 at the engines (model time: see `engineTtftMs`). */
  smallTenantsEngineTtftP99Ms?: number;
  /**
   * How far the measurement itself was disturbed: CPU cores used by the gateways (each), the
   * engines' process and the clients' over the cell; how late the engines' steps ran after their
   * model time, and the clients' event-loop delay p99 in ms.
   */
  machine: {
    cpuCores: { gateways: number[]; engines: number; clients: number };
    /** Mean ms per step, and the share of steps more than 5 ms late. */
    engineLateness: { meanMs: number; over5ms: number };
    clientLoopDelayP99Ms: number;
  };
}

export interface RoutingReport {
  date: string;
  quick: boolean;
  machine: { cpus: number; model: string; node: string };
  command: string;
  settings: {
    engines: number;
    engine: Record<string, unknown>;
    load: number;
    seconds: number;
    warmupSeconds: number;
    drainSeconds: number;
    seed: number;
    policies: string[];
    replicas: number[];
    workloads: string[];
  };
  durationSeconds: number;
  cells: CellResult[];
}

const TITLES: Record<string, string> = {
  chat: '(a) multi-turn chat sessions sharing system prompts',
  agent: '(b) agent loops with long growing contexts',
  short: '(c) independent short prompts',
  tenants: '(d) one hot tenant beside many small ones',
  burst: 'cold burst: twice the batch slots sent at once to gateways that have not seen the engines full',
};

const pct = (v: number | null | undefined) =>
  v === null || v === undefined ? '–' : `${(v * 100).toFixed(1)}%`;
const ms = (v: number | undefined) =>
  v === undefined || Number.isNaN(v) ? '–' : v >= 100 ? v.toFixed(0) : v.toFixed(1);

/** A cell measured while the machine was busy: its engines ran steps late, or its clients' event loop lagged. */
const BUSY = (c: CellResult) => c.machine.engineLateness.meanMs > 2 || c.machine.clientLoopDelayP99Ms > 50;

function problems(c: CellResult): string {
  const bad = Object.entries(c.outcomes).filter(([k]) => k !== 'ok');
  return bad.length === 0 ? '0' : bad.map(([k, v]) => `${v} ${k}`).join(', ');
}

export function markdownReport(r: RoutingReport): string {
  const s = r.settings;
  const e = s.engine;
  const lines: string[] = [
    `Routing benchmark, ${r.date}${r.quick ? ' (quick)' : ''}: ${r.machine.cpus} × ${r.machine.model}, Node ${r.machine.node.replace(/^v/, '')}; ${r.durationSeconds} s.`,
    `\`${r.command}\``,
    '',
    `${s.engines} simulated engines (batch ${e.maxBatch}, ${e.cacheBlocks} blocks of ${e.blockSize} tokens, prefill ${e.prefillTokensPerSecond} tokens/s, decode ${e.decodeTokensPerSecond} tokens/s alone, +${e.batchSlowdown} a step per sequence); offered load ${s.load} of the batched capacity; sessions sent for ${s.seconds} s, measured after the first ${s.warmupSeconds} s; caches cold at the start of each cell.`,
  ];
  const alone = new Map(
    r.cells
      .filter((c) => c.workload === 'tenants-alone')
      .map((c) => [`${c.policy}/${c.replicas}`, c] as const),
  );
  for (const workload of s.workloads) {
    if (workload === 'tenants-alone') continue;
    const cells = r.cells.filter((c) => c.workload === workload);
    if (cells.length === 0) continue;
    const first = cells[0]!;
    const tenants = workload === 'tenants';
    if (workload === 'burst') {
      lines.push(
        '',
        `**${TITLES[workload]}** — ${first.requests} requests, engines' batch ${e.maxBatch}`,
        '',
        '| policy | replicas | TTFT p50 / p90 / p99 ms | at the engines p50 / p90 / p99 ms | most in one engine at once | in each engine at most | failed or cut |',
        '| --- | ---: | ---: | ---: | ---: | --- | ---: |',
      );
      for (const c of cells) {
        const peaks = c.enginePeaks ?? [];
        lines.push(
          `| ${c.policy}${BUSY(c) ? ' †' : ''} | ${c.replicas} | ${ms(c.ttftMs.p50)} / ${ms(c.ttftMs.p90)} / ${ms(c.ttftMs.p99)} | ${ms(c.engineTtftMs.p50)} / ${ms(c.engineTtftMs.p90)} / ${ms(c.engineTtftMs.p99)} | ${Math.max(0, ...peaks)} | ${peaks.join(', ')} | ${problems(c)} |`,
        );
      }
      continue;
    }
    lines.push(
      '',
      `**${TITLES[workload] ?? workload}** — offered ${first.offeredRps.toFixed(1)} requests/s, capacity ${first.capacityRps.toFixed(1)}`,
      '',
      `| policy | replicas | TTFT p50 / p90 / p99 ms | at the engines p50 / p90 / p99 ms | output tokens/s | prefix-cache hits | same engine as previous turn | batch use | waiting (mean / max) |${tenants ? ' small tenants TTFT p99 ms: with hot / alone | hot TTFT p99 ms |' : ''} failed or cut |`,
      `| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |${tenants ? ' ---: | ---: |' : ''} ---: |`,
    );
    for (const c of cells) {
      const a = alone.get(`${c.policy}/${c.replicas}`);
      lines.push(
        `| ${c.policy}${BUSY(c) ? ' †' : ''} | ${c.replicas} | ${ms(c.ttftMs.p50)} / ${ms(c.ttftMs.p90)} / ${ms(c.ttftMs.p99)} | ${ms(c.engineTtftMs.p50)} / ${ms(c.engineTtftMs.p90)} / ${ms(c.engineTtftMs.p99)} | ${c.outputTokensPerSecond.toFixed(0)} | ${pct(c.prefixHitRate)} | ${pct(c.sameEngineRate)} | ${pct(c.batchUse)} | ${c.waiting.mean.toFixed(1)} / ${c.waiting.max} |${tenants ? ` ${ms(c.smallTenantsTtftP99Ms)} / ${ms(a?.smallTenantsTtftP99Ms)} | ${ms(c.hotTenantTtftP99Ms)} |` : ''} ${problems(c)} |`,
      );
    }
  }
  if (r.cells.some(BUSY)) {
    lines.push(
      '',
      "† Measured while the machine was busy (its engines ran their steps more than 2 ms late on average, or the clients' event loop lagged more than 50 ms at p99: see the last table): its TTFT at the client carries that, its TTFT at the engines much less.",
    );
  }
  lines.push(
    '',
    "The measurement itself (a shared machine): CPU cores used, how late the engines ran their steps after their model time, the clients' event-loop delay.",
    '',
    '| workload | policy | replicas | CPU cores: gateways / engines / clients | engine steps: mean lateness ms / share > 5 ms | client loop delay p99 ms |',
    '| --- | --- | ---: | ---: | ---: | ---: |',
  );
  for (const c of r.cells) {
    const m = c.machine;
    lines.push(
      `| ${c.workload} | ${c.policy} | ${c.replicas} | ${m.cpuCores.gateways.join(' + ')} / ${m.cpuCores.engines} / ${m.cpuCores.clients} | ${m.engineLateness.meanMs} / ${pct(m.engineLateness.over5ms)} | ${m.clientLoopDelayP99Ms} |`,
    );
  }
  return lines.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2];
  if (!file) throw new Error('usage: tsx bench/routing-report.ts bench/results/routing-<date>.json');
  console.log(markdownReport(JSON.parse(readFileSync(file, 'utf8')) as RoutingReport));
}
