/**
 * Routing benchmark runs of two builds side by side (runs alternated, as the README's comparisons
 * are made): `tsx bench/routing-compare.ts before=a.json,c.json after=b.json,d.json [--policy scorer]`.
 * Per workload and replica count, each side's TTFT p50 / p90 / p99 in every run and their mean,
 * and for (d) the small tenants' p99 with the hot tenant over alone and the hot tenant's p99.
 */
import { readFileSync } from 'node:fs';
import type { CellResult, RoutingReport } from './routing-report.js';

interface Side {
  label: string;
  runs: RoutingReport[];
}

const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
const fixed = (v: number) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));

function sides(argv: string[]): { sides: Side[]; policy: string } {
  let policy = 'scorer';
  const out: Side[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--policy') {
      policy = argv[++i] ?? policy;
      continue;
    }
    const [label, files] = arg.split('=');
    if (!label || !files) throw new Error(`expected label=file[,file...], got ${arg}`);
    out.push({
      label,
      runs: files.split(',').map((f) => JSON.parse(readFileSync(f, 'utf8')) as RoutingReport),
    });
  }
  if (out.length === 0) throw new Error('usage: tsx bench/routing-compare.ts before=a.json after=b.json');
  return { sides: out, policy };
}

function cell(
  run: RoutingReport,
  workload: string,
  policy: string,
  replicas: number,
): CellResult | undefined {
  return run.cells.find((c) => c.workload === workload && c.policy === policy && c.replicas === replicas);
}

export function compare(all: Side[], policy: string): string {
  const lines = [
    `policy ${policy}; per side: each run, then their mean`,
    '',
    '| workload | replicas | side | TTFT p50 / p90 / p99 ms | small tenants p99 with hot / alone (×) | hot p99 ms |',
    '| --- | ---: | --- | --- | --- | ---: |',
  ];
  const workloads = [...new Set(all.flatMap((s) => s.runs.flatMap((r) => r.settings.workloads)))].filter(
    (w) => w !== 'tenants-alone',
  );
  const replicaCounts = [...new Set(all.flatMap((s) => s.runs.flatMap((r) => r.settings.replicas)))];
  for (const workload of workloads) {
    for (const replicas of replicaCounts) {
      for (const side of all) {
        const cells = side.runs.flatMap((run) => {
          const c = cell(run, workload, policy, replicas);
          if (!c) return [];
          return [{ c, alone: cell(run, 'tenants-alone', policy, replicas) }];
        });
        if (cells.length === 0) continue;
        const ttft = (f: (c: CellResult) => number) => cells.map(({ c }) => f(c));
        const p50 = ttft((c) => c.ttftMs.p50);
        const p90 = ttft((c) => c.ttftMs.p90);
        const p99 = ttft((c) => c.ttftMs.p99);
        const tenants = workload === 'tenants';
        const ratios = cells.map(
          ({ c, alone }) =>
            (c.smallTenantsTtftP99Ms ?? Number.NaN) / (alone?.smallTenantsTtftP99Ms ?? Number.NaN),
        );
        const runs = cells.map(
          (_, i) =>
            `${fixed(p50[i]!)} / ${fixed(p90[i]!)} / ${fixed(p99[i]!)}${tenants ? ` (${ratios[i]!.toFixed(2)}×)` : ''}`,
        );
        lines.push(
          `| ${workload} | ${replicas} | ${side.label} | ${runs.join('; ')}; **mean ${fixed(mean(p50))} / ${fixed(mean(p90))} / ${fixed(mean(p99))}** | ${
            tenants
              ? `${cells.map(({ c, alone }) => `${fixed(c.smallTenantsTtftP99Ms ?? Number.NaN)} / ${fixed(alone?.smallTenantsTtftP99Ms ?? Number.NaN)}`).join('; ')}; **mean ${mean(ratios).toFixed(2)}×**`
              : ''
          } | ${tenants ? fixed(mean(cells.map(({ c }) => c.hotTenantTtftP99Ms ?? Number.NaN))) : ''} |`,
        );
      }
    }
  }
  return lines.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { sides: all, policy } = sides(process.argv.slice(2));
  console.log(compare(all, policy));
}
