/**
 * Compares two relays on non-streaming chat, interleaved so that a shared, noisy machine weighs on
 * both alike: `tsx bench/ab.ts <a> <b> [seconds] [concurrency]`, where a and b are gateway builds'
 * `cli/main.js` or `floor`, `floor:fastify`, `floor:duties`, `floor:checks` (bench/floor-relay.ts's modes).
 * Starts one mock worker and a gateway from each build, then alternates 1 s slices of closed-loop
 * load between them; prints each one's CPU per request (from /proc/<pid>/stat) and the ratio.
 * A side may carry node flags before its build: `'--max-semi-space-size=32 dist/cli/main.js'`.
 * `AB_API=messages` or `AB_API=responses` sends Anthropic Messages or Responses (`store: false`)
 * requests instead of chat completions. `AB_POLICY=<name>` sets both gateways' `routing.policy`
 * (their default otherwise: builds with different defaults then compare their defaults).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { closedLoop } from './load.js';
import { cpuSeconds, type Proc, startCli, startRelay, stop } from './processes.js';

const [a, b] = [process.argv[2], process.argv[3]];
if (!a || !b) throw new Error('usage: ab.ts <a> <b> [seconds] [concurrency]');
const seconds = Number(process.argv[4] ?? 20);
const concurrency = Number(process.argv[5] ?? 64);
const dir = mkdtempSync(join(tmpdir(), 'sluice-ab-'));
const worker = await startCli([
  'mock-worker',
  '--port',
  '0',
  '--model',
  'm',
  '--tokens-per-second',
  '0',
  '--max-tokens',
  '16',
]);
const configFile = join(dir, 'sluice.yaml');
writeFileSync(
  configFile,
  stringify({
    workers: [{ url: worker.url }],
    storage: { kind: 'none' },
    ...(process.env.AB_POLICY ? { routing: { policy: process.env.AB_POLICY } } : {}),
  }),
);
/** `AB_PROFILE_DIR=<dir>`: both relays run under `node --cpu-prof`, their profiles written there. */
const prof = process.env.AB_PROFILE_DIR ? ['--cpu-prof', '--cpu-prof-dir', process.env.AB_PROFILE_DIR] : [];
const gateways: Proc[] = [
  await startRelay(a, worker.url, configFile, prof),
  await startRelay(b, worker.url, configFile, prof),
];
const body = JSON.stringify({
  model: 'm',
  messages: [{ role: 'user', content: 'x'.repeat(1000) }],
  max_tokens: 16,
});
const API_PATHS: Record<string, string> = {
  chat: '/v1/chat/completions',
  messages: '/v1/messages',
  responses: '/v1/responses',
};
const api = process.env.AB_API ?? 'chat';
const path = API_PATHS[api];
if (!path) throw new Error(`AB_API must be one of ${Object.keys(API_PATHS).join(', ')}`);
const requestBody =
  api === 'responses'
    ? JSON.stringify({ model: 'm', input: 'x'.repeat(1000), max_output_tokens: 16, store: false })
    : body;
const totals = gateways.map(() => ({ cpu: 0, requests: 0, errors: 0 }));
try {
  for (const g of gateways) await closedLoop(new URL(g.url).origin, path, requestBody, concurrency, 3);
  for (let s = 0; s < seconds; s++) {
    for (const [i, g] of gateways.entries()) {
      const before = cpuSeconds(g.pid);
      const run = await closedLoop(new URL(g.url).origin, path, requestBody, concurrency, 1);
      totals[i]!.cpu += cpuSeconds(g.pid) - before;
      totals[i]!.requests += run.requests;
      totals[i]!.errors += run.errors;
    }
  }
} finally {
  await Promise.all([...gateways.map((g) => stop(g, prof.length > 0 ? 'SIGTERM' : 'SIGKILL')), stop(worker)]);
}
const micros = totals.map((t) => (t.cpu / t.requests) * 1e6);
for (const [i, t] of totals.entries()) {
  console.log(
    `${i === 0 ? 'a' : 'b'} ${[a, b][i]}: ${t.requests} requests, ${t.errors} errors, ${micros[i]!.toFixed(1)} µs CPU each`,
  );
}
console.log(`c=${concurrency}: b / a = ${(micros[1]! / micros[0]!).toFixed(3)}`);
