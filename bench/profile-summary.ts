import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** A V8 CPU profile as `node --cpu-prof` writes it (the fields read here). */
interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  file: string;
  /** Milliseconds on CPU (idle excluded). */
  busyMs: number;
  /** Share of the busy time by where it went: a package, node's own modules, the gateway's code, GC, syscalls. */
  byArea: Record<string, number>;
  /** The functions with the most self time, as shares of the busy time. */
  topFunctions: { fn: string; share: number }[];
}

const SYSCALLS = new Set(['writev', 'writeBuffer', 'writeUtf8String', 'writeLatin1String', 'read']);

function areaOf(url: string, fn: string): string {
  if (fn === '(garbage collector)') return 'gc';
  if (fn === '(program)') return 'v8 (program)';
  if (url === '' && SYSCALLS.has(fn)) return 'socket syscalls';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
  if (pkg) return pkg;
  if (url.startsWith('node:')) return 'node core';
  if (url.includes('/dist/') || url.includes('/src/')) return 'sluice';
  if (url.includes('/bench/')) return 'floor relay code';
  return url === '' ? 'native' : 'other';
}

/**
 * Summarizes the main thread's profile in `dir`: the largest one (a process run with
 * `--import tsx` writes one for its module-loader thread as well).
 */
export function summarizeProfile(dir: string): ProfileSummary {
  const name = readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort((a, b) => statSync(join(dir, a)).size - statSync(join(dir, b)).size)
    .at(-1);
  if (!name) throw new Error(`no .cpuprofile in ${dir}`);
  const file = join(dir, name);
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const byArea = new Map<string, number>();
  const byFn = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const frame = frames.get(id);
    const micros = profile.timeDeltas[i] ?? 0;
    if (!frame || frame.functionName === '(idle)') return;
    busy += micros;
    const area = areaOf(frame.url, frame.functionName);
    byArea.set(area, (byArea.get(area) ?? 0) + micros);
    const where = frame.url ? ` ${frame.url.split('/').slice(-2).join('/')}:${frame.lineNumber + 1}` : '';
    const fn = `${frame.functionName || '(anonymous)'}${where}`;
    byFn.set(fn, (byFn.get(fn) ?? 0) + micros);
  });
  const share = (micros: number) => Math.round((micros / busy) * 1000) / 10;
  return {
    file,
    busyMs: Math.round(busy / 1000),
    byArea: Object.fromEntries(
      [...byArea]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 16)
        .map(([k, v]) => [k, share(v)]),
    ),
    topFunctions: [...byFn]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 12)
      .map(([fn, v]) => ({ fn, share: share(v) })),
  };
}
