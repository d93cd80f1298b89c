import { CacheAwarePolicy } from '../src/routing/cache-aware.js';
import { RadixTree } from '../src/routing/index.js';
import type { Candidate } from '../src/routing/types.js';
import { percentile } from './stats.js';

/**
 * Time of one cache_aware routing decision with 10,000 cached prefixes: 8 workers, prompts of
 * about 1 KB that share one of 50 system prompts, half of them follow-ups of earlier ones.
 */
export function routingDecisionMicros(prefixes = 10_000, probes = 20_000): { p50: number; p99: number } {
  let seed = 42;
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const words = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi'.split(
    ' ',
  );
  const text = (n: number) =>
    Array.from({ length: n }, () => words[Math.floor(random() * words.length)]).join(' ');
  const systems = Array.from({ length: 50 }, () => text(60));
  const candidates: Candidate[] = Array.from({ length: 8 }, (_, i) => ({ id: `10.0.0.${i}:8000`, load: 0 }));
  const policy = new CacheAwarePolicy({ maxTreeChars: 64_000_000 });
  const prompts: string[] = [];
  for (let i = 0; i < prefixes; i++) {
    const prompt = `${systems[i % systems.length]}\n${text(100)}`;
    prompts.push(prompt);
    policy.select(candidates, { text: prompt });
  }
  const samples: number[] = [];
  for (let i = 0; i < probes; i++) {
    const prompt =
      i % 2 === 0
        ? `${prompts[Math.floor(random() * prompts.length)]} ${text(10)}`
        : `${systems[i % 50]}\n${text(100)}`;
    const t0 = performance.now();
    policy.select(candidates, { text: prompt });
    samples.push((performance.now() - t0) * 1000);
  }
  return { p50: percentile(samples, 50), p99: percentile(samples, 99) };
}

/**
 * Time of one radix-tree prefix lookup (the core of a cache_aware decision): a 1 KB prompt
 * among 10,000 cached ones sharing 20 system prompts, 8 workers allowed. This was a unit test's
 * threshold (p99 under 50 µs); as a benchmark it is measured, not asserted.
 */
export function radixLookupMicros(prefixes = 10_000, probes = 3_000): { p50: number; p99: number } {
  let seed = 12;
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const text = (length: number) =>
    String.fromCharCode(...Array.from({ length }, () => 97 + Math.floor(random() * 26)));
  const tree = new RadixTree();
  const systems = Array.from({ length: 20 }, () => text(600));
  const texts = Array.from({ length: prefixes }, (_, i) => systems[i % 20] + text(424));
  for (const [i, t] of texts.entries()) tree.insert(t, `w${i % 8}`);
  const allowed = new Set(Array.from({ length: 8 }, (_, i) => `w${i}`));
  const queries = texts.slice(0, probes).map((t, i) => (i % 2 ? `${t} and a follow-up` : t.slice(0, 900)));
  for (const q of queries.slice(0, 500)) tree.prefixMatch(q, allowed); // warm up the JIT
  const samples = queries.map((q) => {
    const t0 = performance.now();
    tree.prefixMatch(q, allowed);
    return (performance.now() - t0) * 1000;
  });
  return { p50: percentile(samples, 50), p99: percentile(samples, 99) };
}
