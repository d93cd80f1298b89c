/**
 * Compares two relays on streams, run at the same time so that a shared, noisy machine weighs on
 * both alike: `tsx bench/ab-streams.ts <a> <b> [streams each] [seconds]`, where a and b are a
 * gateway build's `cli/main.js` or `floor`, `floor:fastify`, `floor:duties`, `floor:checks` (bench/floor-relay.ts's
 * modes), a gateway build possibly after node flags (`'--max-semi-space-size=32 dist/cli/main.js'`).
 * One mock worker at 50 tokens/s;
 * prints each relay's relayed events per CPU-second (from /proc/<pid>/stat) and the ratio.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { streams, summarize } from './load.js';
import { cpuSeconds, rssBytes, startCli, startRelay, stop } from './processes.js';

/** Read and write system calls a process has made, from /proc/<pid>/io. */
function syscalls(pid: number): { reads: number; writes: number } {
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  return { reads: Number(/syscr: (\d+)/.exec(io)?.[1]), writes: Number(/syscw: (\d+)/.exec(io)?.[1]) };
}

const [a, b] = [process.argv[2], process.argv[3]];
if (!a || !b) throw new Error('usage: ab-streams.ts <a> <b> [streams each] [seconds]');
const count = Number(process.argv[4] ?? 128);
const seconds = Number(process.argv[5] ?? 10);
const dir = mkdtempSync(join(tmpdir(), 'sluice-ab-'));
const worker = await startCli(['mock-worker', '--port', '0', '--model', 'm', '--tokens-per-second', '50']);
const configFile = join(dir, 'sluice.yaml');
writeFileSync(configFile, stringify({ workers: [{ url: worker.url }], storage: { kind: 'none' } }));
/** `AB_PROFILE_DIR=<dir>`: both relays run under `node --cpu-prof`, their profiles written there. */
const prof = process.env.AB_PROFILE_DIR ? ['--cpu-prof', '--cpu-prof-dir', process.env.AB_PROFILE_DIR] : [];
const relays = [
  await startRelay(a, worker.url, configFile, prof),
  await startRelay(b, worker.url, configFile, prof),
];
const body = (tokens: number) =>
  JSON.stringify({
    model: 'm',
    messages: [{ role: 'user', content: 'x'.repeat(1000) }],
    stream: true,
    max_tokens: tokens,
  });
try {
  await Promise.all(
    relays.map((r) => streams(new URL(r.url).origin, '/v1/chat/completions', body(10), 16, '"content":" ')),
  );
  const before = relays.map((r) => ({ cpu: cpuSeconds(r.pid), rss: rssBytes(r.pid), io: syscalls(r.pid) }));
  const peak = before.map((x) => x.rss);
  const sampler = setInterval(() => {
    for (const [i, r] of relays.entries()) peak[i] = Math.max(peak[i]!, rssBytes(r.pid));
  }, 100);
  const runs = await Promise.all(
    relays.map((r) =>
      streams(new URL(r.url).origin, '/v1/chat/completions', body(seconds * 50), count, '"content":" '),
    ),
  );
  clearInterval(sampler);
  const perCpu = runs.map((run, i) => run.events / (cpuSeconds(relays[i]!.pid) - before[i]!.cpu));
  const io = relays.map((r, i) => {
    const now = syscalls(r.pid);
    const b = before[i]!.io;
    return `${((now.reads - b.reads) / runs[i]!.events).toFixed(2)} reads, ${((now.writes - b.writes) / runs[i]!.events).toFixed(2)} writes per event`;
  });
  for (const [i, run] of runs.entries()) {
    const t = summarize(run.ttftMs);
    console.log(
      `${i === 0 ? 'a' : 'b'} ${[a, b][i]}: ${run.events} events, ${run.errors} errors, ${Math.round(perCpu[i]!)} events/CPU-s, TTFT p50/p99 ${t.p50.toFixed(1)}/${t.p99.toFixed(1)} ms, ${((peak[i]! - before[i]!.rss) / count / 1024).toFixed(1)} KB/stream, ${io[i]}`,
    );
  }
  console.log(`events per CPU-second, b / a = ${(perCpu[1]! / perCpu[0]!).toFixed(3)}`);
} finally {
  await Promise.all([...relays.map((r) => stop(r, prof.length > 0 ? 'SIGTERM' : 'SIGKILL')), stop(worker)]);
}
