/**
 * What one read of a worker's `/metrics` costs the event loop: the body is streamed in 64 KiB
 * chunks (as undici hands it over) through the scraper's reading, and the longest stretch the
 * loop was held (between two turns of the loop) and the whole time are printed per body.
 *
 *   npx tsx bench/metrics-read.ts
 */
import { Readable } from 'node:stream';
import {
  newestSeriesOf,
  parseSamples,
  readEngineSignals,
  wantedMetricNames,
} from '../src/workers/engine-metric-names.js';
import { keptLines } from '../src/workers/kept-lines.js';
import { VLLM_METRICS } from '../test/helpers/metrics-engine.js';

const MiB = 1024 * 1024;
const wanted = wantedMetricNames('auto');
const newest = newestSeriesOf('auto');
// The defaults of signals.maxBytes and signals.maxSampleBytes; `--sample-bytes N` for another bound.
const at = process.argv.indexOf('--sample-bytes');
const limits = { maxBytes: 4 * MiB, maxSampleBytes: at > 0 ? Number(process.argv[at + 1]) : 64 * 1024 };

function chunks(text: string): Buffer[] {
  const buf = Buffer.from(text);
  const out: Buffer[] = [];
  for (let i = 0; i < buf.length; i += 65_536) out.push(buf.subarray(i, i + 65_536));
  return out;
}

/** A vLLM V1 exporter with `engines` data-parallel engines and its histograms (what a real one writes). */
function realVllm(engines: number, loraSeries: number): string {
  const model = 'meta-llama/Llama-3.1-8B-Instruct';
  const out: string[] = [VLLM_METRICS];
  for (let e = 0; e < engines; e++) {
    for (const h of [
      'time_to_first_token_seconds',
      'e2e_request_latency_seconds',
      'request_prompt_tokens',
      'inter_token_latency_seconds',
    ]) {
      for (const le of [
        '0.001',
        '0.005',
        '0.01',
        '0.02',
        '0.04',
        '0.06',
        '0.08',
        '0.1',
        '0.25',
        '0.5',
        '1.0',
        '2.5',
        '5.0',
        '10.0',
        '+Inf',
      ])
        out.push(`vllm:${h}_bucket{engine="${e}",le="${le}",model_name="${model}"} 12.0`);
    }
    out.push(`vllm:num_requests_running{engine="${e}",model_name="${model}"} 3.0`);
    out.push(`vllm:num_requests_waiting{engine="${e}",model_name="${model}"} 1.0`);
    out.push(`vllm:kv_cache_usage_perc{engine="${e}",model_name="${model}"} 0.5`);
  }
  // vLLM's gauge keeps one series per combination of adapters ever seen.
  for (let i = 0; i < loraSeries; i++)
    out.push(
      `vllm:lora_requests_info{max_lora="8",running_lora_adapters="sql-lora-${i % 97},chat-lora-${i % 13},summ-lora-${i}",waiting_lora_adapters="tool-lora-${i % 7}"} ${1.7331e9 + i}`,
    );
  return `${out.join('\n')}\n`;
}

function hostileLora(bytes: number): string {
  // 200,000 adapter names in one label, split into lines under the scraper's line bound (256 KiB).
  const lines: string[] = [];
  let total = 0;
  let n = 0;
  while (total < bytes) {
    const names: string[] = [];
    let len = 0;
    while (len < 240_000) {
      const name = `adapter-${n++}`;
      names.push(name);
      len += name.length + 1;
    }
    const line = `vllm:lora_requests_info{max_lora="8",running_lora_adapters="${names.join(',')}",waiting_lora_adapters=""} ${1.7e9 + n}`;
    lines.push(line);
    total += line.length + 1;
  }
  return `vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n${lines.join('\n')}\n`;
}

/** LoRA series of one scheduler, `count` lines of about `lineBytes`, each newer than the last. */
function loraHistory(count: number, lineBytes: number): string {
  const lines = ['vllm:num_requests_running 1', 'vllm:num_requests_waiting 0'];
  for (let i = 0; i < count; i++) {
    const names: string[] = [];
    for (let len = 0; len < lineBytes - 110; len += 14) names.push(`a-${i}-${names.length}`);
    lines.push(
      `vllm:lora_requests_info{max_lora="8",running_lora_adapters="${names.join(',')}",waiting_lora_adapters=""} ${1.7e9 + i}`,
    );
  }
  return `${lines.join('\n')}\n`;
}

function manySeries(bytes: number, lineBytes: number): string {
  const lines: string[] = ['vllm:num_requests_waiting 0'];
  let total = 0;
  for (let i = 0; total < bytes; i++) {
    const pad = 'x'.repeat(Math.max(0, lineBytes - 60));
    const line = `vllm:num_requests_running{engine="${i}",pad="${pad}"} 0`;
    lines.push(line);
    total += line.length + 1;
  }
  return `${lines.join('\n')}\n`;
}

async function measure(label: string, text: string): Promise<void> {
  const parts = chunks(text);
  let longest = 0;
  let last = performance.now();
  let ticking = true;
  const tick = () => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  await new Promise((r) => setTimeout(r, 5));
  longest = 0;
  last = performance.now();
  const start = performance.now();
  let outcome: string;
  let keptKiB = 0;
  try {
    const kept = await keptLines(Readable.from(parts), wanted, newest, limits, '/metrics');
    keptKiB = Buffer.byteLength(kept) / 1024;
    const parsed = readEngineSignals(parseSamples(kept), 'auto', Date.now());
    outcome = parsed.ok
      ? `ok running=${parsed.signals.running} lora=${parsed.signals.lora?.running.length ?? '-'}`
      : parsed.reason;
  } catch (err) {
    outcome = `refused: ${(err as Error).message.slice(0, 60)}`;
  }
  const total = performance.now() - start;
  await new Promise((r) => setImmediate(r));
  ticking = false;
  console.log(
    `${label.padEnd(44)} ${(text.length / 1024).toFixed(0).padStart(6)} KiB  total ${total.toFixed(1).padStart(7)} ms  loop held ${longest.toFixed(1).padStart(7)} ms  kept ${keptKiB.toFixed(1).padStart(6)} KiB  ${outcome}`,
  );
}

const cases: [string, string][] = [
  ['vLLM fixture (test/helpers)', VLLM_METRICS],
  ['vLLM, 8 DP engines, histograms, 32 LoRA series', realVllm(8, 32)],
  ['vLLM, 64 DP engines, histograms, 32 LoRA series', realVllm(64, 32)],
  ['vLLM, 8 engines, 2,000 LoRA series (long run)', realVllm(8, 2_000)],
  ['vLLM, 8 engines, 9,000 LoRA series', realVllm(8, 9_000)],
  ['hostile: LoRA names, 1.9 MB in 8 lines', hostileLora(1.9e6)],
  ['hostile: LoRA names, 3.9 MB in 16 lines', hostileLora(3.9e6)],
  ['hostile: 9,000 series of 400 B (3.6 MB)', manySeries(3.6e6, 400)],
  ['hostile: 16 lines of 250 KB label (3.9 MB)', manySeries(3.9e6, 250_000)],
  ['hostile: one 37 KB LoRA line (4,096+ names)', loraHistory(1, 60_000)],
  ['hostile: 150 series of 400 B (60 KB)', manySeries(60_000, 400)],
  ['hostile: one 60 KB label', manySeries(1, 60_000)],
  ['hostile: 80 newer LoRA lines of 50 KB (4 MB)', loraHistory(80, 50_000)],
  ['hostile: 20,000 newer LoRA lines of 200 B', loraHistory(20_000, 200)],
];
for (let round = 0; round < 2; round++) {
  console.log(`round ${round + 1}`);
  for (const [label, text] of cases) await measure(label, text);
}
