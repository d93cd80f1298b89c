/**
 * Profiles one case, through the gateway and the reference relays one after another:
 * `tsx bench/profile-case.ts nonstreaming|streams|openings [seconds] [--gateway-only] [--no-prof]`.
 * Starts a mock worker, then each relay (the gateway from the build, and the floor relay in its
 * bare, fastify and duties modes) under `node --cpu-prof`, drives the case through it (non-streaming
 * at concurrency 64, 256 streams at 50 events/s, or bursts of 256 one-token streams opened at once
 * for the cost of a stream's opening), and prints each relay's CPU per unit of
 * work (from /proc) and where it went: each area's share of the profile's busy time times that
 * CPU, in µs per request or per event, side by side. Start-up is in the profiles too, so the
 * areas are estimates; the /proc figures are not.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { closedLoop, streams } from './load.js';
import { cpuSeconds, type FloorMode, type Proc, startCli, startFloorRelay, stop } from './processes.js';
import { type ProfileSummary, summarizeProfile } from './profile-summary.js';
import { round } from './stats.js';

const kind = process.argv[2] ?? 'nonstreaming';
const seconds = Number(process.argv[3] ?? 10);
const profiled = !process.argv.includes('--no-prof');
const gatewayOnly = process.argv.includes('--gateway-only');
const streaming = kind === 'streams' || kind === 'openings';
const root = mkdtempSync(join(tmpdir(), 'sluice-prof-'));
const worker = await startCli(
  streaming
    ? ['mock-worker', '--port', '0', '--model', 'm', '--tokens-per-second', '50']
    : ['mock-worker', '--port', '0', '--model', 'm', '--tokens-per-second', '0', '--max-tokens', '16'],
);
const configFile = join(root, 'sluice.yaml');
writeFileSync(configFile, stringify({ workers: [{ url: worker.url }], storage: { kind: 'none' } }));
const prompt = 'x'.repeat(1000);
const unit = kind === 'streams' ? 'event' : kind === 'openings' ? 'stream' : 'request';

const relays: { name: string; start: (nodeArgs: string[]) => Promise<Proc> }[] = [
  {
    name: 'gateway',
    start: (nodeArgs) =>
      startCli(['serve', '--port', '0', '--config', configFile, '--log-level', 'info'], {}, nodeArgs),
  },
  ...(gatewayOnly ? [] : (['bare', 'fastify', 'checks', 'duties'] as FloorMode[])).map((mode) => ({
    name: `floor (${mode})`,
    start: (nodeArgs: string[]) => startFloorRelay(worker.url, nodeArgs, mode),
  })),
];

/** Drives the case through `origin`; returns the units of work done. */
async function drive(origin: string, proc: Proc): Promise<{ units: number; cpu: number }> {
  if (kind === 'openings') {
    const body = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: prompt }],
      stream: true,
      max_tokens: 1,
    });
    await streams(origin, '/v1/chat/completions', body, 256, '"content":" ');
    const before = cpuSeconds(proc.pid);
    const until = performance.now() + seconds * 1000;
    let units = 0;
    while (performance.now() < until) {
      units += 256 - (await streams(origin, '/v1/chat/completions', body, 256, '"content":" ')).errors;
    }
    return { units, cpu: cpuSeconds(proc.pid) - before };
  }
  if (streaming) {
    const body = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: prompt }],
      stream: true,
      max_tokens: seconds * 50,
    });
    const warm = body.replace(/"max_tokens":\d+/, '"max_tokens":10');
    await streams(origin, '/v1/chat/completions', warm, 16, '"content":" ');
    const before = cpuSeconds(proc.pid);
    const run = await streams(origin, '/v1/chat/completions', body, 256, '"content":" ');
    return { units: run.events, cpu: cpuSeconds(proc.pid) - before };
  }
  const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: prompt }], max_tokens: 16 });
  await closedLoop(origin, '/v1/chat/completions', body, 64, 3);
  const before = cpuSeconds(proc.pid);
  const run = await closedLoop(origin, '/v1/chat/completions', body, 64, seconds);
  return { units: run.requests, cpu: cpuSeconds(proc.pid) - before };
}

const results: { name: string; micros: number; profile: ProfileSummary | undefined }[] = [];
try {
  for (const relay of relays) {
    const dir = join(root, relay.name.replace(/\W+/g, '-'));
    const proc = await relay.start(profiled ? ['--cpu-prof', '--cpu-prof-dir', dir] : []);
    try {
      const { units, cpu } = await drive(new URL(proc.url).origin, proc);
      results.push({ name: relay.name, micros: round((cpu / units) * 1e6, 1), profile: undefined });
    } finally {
      // SIGTERM lets the process write its profile.
      await stop(proc, 'SIGTERM');
    }
    if (profiled) results.at(-1)!.profile = summarizeProfile(dir);
  }
} finally {
  await stop(worker);
}

console.log(
  `${kind}: CPU µs per ${unit}: ${results.map((r) => `${r.name} ${r.micros}`).join(', ')} (from /proc)`,
);
if (profiled) {
  const areas = [...new Set(results.flatMap((r) => Object.keys(r.profile!.byArea)))];
  const micros = (r: (typeof results)[number], area: string) =>
    round(((r.profile!.byArea[area] ?? 0) / 100) * r.micros, 1);
  console.log(`\nwhere it went, µs per ${unit} (area share of the profile's busy time × CPU per ${unit}):`);
  console.log(['area', ...results.map((r) => r.name)].join(' | '));
  for (const area of areas.sort((a, b) => micros(results[0]!, b) - micros(results[0]!, a))) {
    console.log([area, ...results.map((r) => micros(r, area))].join(' | '));
  }
  const gateway = results[0]!.profile!;
  console.log(`\ngateway's top functions by self time (% of busy; ${gateway.file}):`);
  for (const { fn, share } of gateway.topFunctions) console.log(`${String(share).padStart(5)}  ${fn}`);
}
