/**
 * Profiles the gateway on one case alone: `tsx bench/profile-case.ts nonstreaming|streams [seconds]`.
 * Starts a mock worker and the gateway (from the build) under `node --cpu-prof`, drives the
 * case, prints the gateway's CPU per unit of work (from /proc) and where its CPU went.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { closedLoop, streams } from './load.js';
import { cpuSeconds, startCli, stop } from './processes.js';
import { summarizeProfile } from './profile-summary.js';

const kind = process.argv[2] ?? 'nonstreaming';
const seconds = Number(process.argv[3] ?? 10);
const profiled = !process.argv.includes('--no-prof');
const dir = mkdtempSync(join(tmpdir(), 'sluice-prof-'));
const streaming = kind === 'streams';
const worker = await startCli(
  streaming
    ? ['mock-worker', '--port', '0', '--model', 'm', '--tokens-per-second', '50']
    : ['mock-worker', '--port', '0', '--model', 'm', '--tokens-per-second', '0', '--max-tokens', '16'],
);
const configFile = join(dir, 'sluice.yaml');
writeFileSync(configFile, stringify({ workers: [{ url: worker.url }], storage: { kind: 'none' } }));
const gateway = await startCli(
  ['serve', '--port', '0', '--config', configFile, '--log-level', 'info'],
  {},
  profiled ? ['--cpu-prof', '--cpu-prof-dir', dir] : [],
);
const origin = new URL(gateway.url).origin;
const prompt = 'x'.repeat(1000);
try {
  if (streaming) {
    const body = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: prompt }],
      stream: true,
      max_tokens: seconds * 50,
    });
    const before = cpuSeconds(gateway.pid);
    const run = await streams(origin, '/v1/chat/completions', body, 256, '"content":" ');
    const cpu = cpuSeconds(gateway.pid) - before;
    console.log(`events ${run.events} errors ${run.errors} events/CPU-s ${Math.round(run.events / cpu)}`);
  } else {
    const body = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: prompt }],
      max_tokens: 16,
    });
    for (const c of [1, 64]) {
      await closedLoop(origin, '/v1/chat/completions', body, c, 3);
      const before = cpuSeconds(gateway.pid);
      const run = await closedLoop(origin, '/v1/chat/completions', body, c, seconds);
      const cpu = cpuSeconds(gateway.pid) - before;
      console.log(
        `c=${c}: ${run.requests} requests, ${run.errors} errors, ${Math.round((cpu / run.requests) * 1e6)} µs CPU each`,
      );
    }
  }
} finally {
  await stop(gateway, 'SIGTERM');
  await stop(worker);
}
if (profiled) {
  const p = summarizeProfile(dir);
  console.log(`busy ${p.busyMs} ms; ${p.file}`);
  console.log(p.byArea);
  for (const { fn, share } of p.topFunctions) console.log(`${String(share).padStart(5)}  ${fn}`);
}
