/**
 * The routing benchmark's command line (bench/routing.ts): its flags, their defaults and checks,
 * and the engine model its fleet runs unless `--engine` says otherwise.
 */
import { readFileSync } from 'node:fs';
import { type ParseArgsConfig, parseArgs as parseFlags } from 'node:util';
import { parse as parseYaml } from 'yaml';
import type { EngineOptions } from '../src/mock/engine-options.js';
import { POLICY_NAMES } from '../src/routing/types.js';
import { OTHER_WORKLOADS, WORKLOADS, type WorkloadName } from './routing-workloads.js';

/** The fleet's engines unless `--engine` says otherwise: small batches, so that 8 engines' streams stay light for a shared 2-core machine. */
export const BENCH_ENGINE: EngineOptions = {
  maxBatch: 16,
  maxBatchedTokens: 2048,
  blockSize: 16,
  cacheBlocks: 8192,
  prefillTokensPerSecond: 20_000,
  decodeTokensPerSecond: 50,
  batchSlowdown: 0.03,
  // As vLLM with --scheduling-policy priority: the gateway's workers say so (bench/routing.ts), and
  // it sets each request's priority (flow control's order: class, then the tenant's requests in flight).
  schedulingPolicy: 'priority',
};

export interface Args {
  quick: boolean;
  policies: string[];
  replicas: number[];
  workloads: WorkloadName[];
  load: number;
  seconds: number;
  warmup: number;
  drain: number;
  engines: number;
  seed: number;
  engine: EngineOptions;
  gatewayConfig: Record<string, unknown>;
  tenantHeader: string;
  /** A file to append each traced request's engine record to (`--dump`). */
  dump: string | undefined;
  /** Whether each worker's configuration names its engine's batch (`maxBatch`; `--worker-batch`). */
  workerBatch: boolean;
}

/** Every flag: `--quick` alone is a switch, the others take a value (`--name value` or `--name=value`). */
const OPTIONS = {
  quick: { type: 'boolean' },
  // Each worker's configuration names its engine's batch, as an operator who knows the engine's
  // --max-num-seqs would (a gateway from before `workers[].maxBatch` refuses the key).
  'worker-batch': { type: 'boolean' },
  policies: { type: 'string' },
  replicas: { type: 'string' },
  workloads: { type: 'string' },
  load: { type: 'string' },
  seconds: { type: 'string' },
  warmup: { type: 'string' },
  drain: { type: 'string' },
  engines: { type: 'string' },
  seed: { type: 'string' },
  engine: { type: 'string' },
  'gateway-config': { type: 'string' },
  'tenant-header': { type: 'string' },
  dump: { type: 'string' },
} as const satisfies ParseArgsConfig['options'];

/** Node's parse of `argv`, its two commonest complaints said as this bench always said them. */
function parseWithNode(argv: string[]) {
  try {
    return parseFlags({ args: argv, options: OPTIONS, strict: true, allowPositionals: true, tokens: true });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const message = err instanceof Error ? err.message : String(err);
    const flag = /'(-[^' ]+)/.exec(message)?.[1];
    if (flag && code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') throw new Error(`unknown flag ${flag}`);
    if (flag && code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && message.endsWith('argument missing'))
      throw new Error(`${flag} needs a value`);
    throw err;
  }
}

export function parseArgs(argv: string[]): Args {
  const { values: flags, tokens } = parseWithNode(argv);
  for (const token of tokens) {
    // `npm run bench -- routing ...`: bench/run.ts hands its arguments over, `routing` first.
    if (token.kind === 'positional' && !(token.index === 0 && token.value === 'routing'))
      throw new Error(`unexpected argument ${token.value}`);
  }
  const quick = flags.quick === true;
  const list = (name: 'policies' | 'workloads' | 'replicas', fallback: string) =>
    (flags[name] ?? fallback)
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  const number = (name: 'load' | 'seconds' | 'warmup' | 'drain' | 'engines' | 'seed', fallback: number) => {
    const value = Number(flags[name] ?? fallback);
    if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number`);
    return value;
  };
  const policies = list('policies', 'round_robin,least_outstanding,cache_aware,scorer');
  for (const p of policies) {
    if (!(POLICY_NAMES as readonly string[]).includes(p)) {
      throw new Error(`--policies: ${p} is not a policy of this gateway (${POLICY_NAMES.join(', ')})`);
    }
  }
  const workloads = list('workloads', WORKLOADS.join(','));
  for (const w of workloads)
    if (![...WORKLOADS, ...OTHER_WORKLOADS].includes(w as WorkloadName))
      throw new Error(`--workloads: unknown ${w} (${[...WORKLOADS, ...OTHER_WORKLOADS].join(', ')})`);
  const replicas = list('replicas', '1,2').map(Number);
  if (replicas.some((r) => !Number.isInteger(r) || r < 1)) throw new Error('--replicas: positive integers');
  const configFile = flags['gateway-config'];
  // 24 s cells by default: a p99 is the slowest 1% of what a cell measured, and in 8 s cells the
  // small tenants of (d) sent about 150 requests (their p99 the second slowest): run to run it
  // moved between 1.5 and 2.4 times theirs alone. A queue that grows (a policy the load outruns)
  // shows as one, not as the first seconds of it.
  const seconds = number('seconds', quick ? 2 : 24);
  const warmup = number('warmup', quick ? 0.5 : 2);
  if (warmup >= seconds) throw new Error('--warmup must be shorter than --seconds');
  const engines = number('engines', 8);
  const seed = number('seed', 1);
  if (!Number.isInteger(engines) || !Number.isInteger(seed))
    throw new Error('--engines and --seed: integers');
  return {
    quick,
    policies,
    replicas,
    workloads: workloads as WorkloadName[],
    load: number('load', 0.85),
    seconds,
    warmup,
    drain: number('drain', quick ? 2 : 6),
    engines,
    seed,
    engine: { ...BENCH_ENGINE, ...(JSON.parse(flags.engine ?? '{}') as EngineOptions) },
    gatewayConfig: configFile
      ? ((parseYaml(readFileSync(configFile, 'utf8')) ?? {}) as Record<string, unknown>)
      : {},
    tenantHeader: flags['tenant-header'] ?? 'x-tenant-id',
    dump: flags.dump,
    workerBatch: flags['worker-batch'] === true,
  };
}
