import { type Command, Option } from 'commander';
import { resolveEngineOptions } from '../mock/engine-options.js';
import { createMockWorker, type EngineOptions, FaultSpecError, parseFault } from '../mock/mock-worker.js';
import { collect, parseIntOption, parseNumberOption } from './options.js';
import { onTermination } from './signals.js';
import { StartupError } from './startup.js';

interface MockFlags {
  port: number;
  host: string;
  model?: string[];
  tokensPerSecond: number;
  maxTokens: number;
  fault?: string;
  dpSize?: number;
  engine?: boolean;
  maxBatch?: number;
  maxBatchedTokens?: number;
  blockSize?: number;
  cacheBlocks?: number;
  prefixCaching?: boolean;
  prefillTokensPerSecond?: number;
  decodeTokensPerSecond?: number;
  batchSlowdown?: number;
  lora?: string[];
  maxLoras?: number;
  loraLoadMs?: number;
  schedulingPolicy?: 'fcfs' | 'priority';
  jitter?: number;
  seed?: number;
}

/** The engine model's options from the flags: any engine flag turns it on. */
function engineOptionsOf(flags: MockFlags): EngineOptions | undefined {
  const options: EngineOptions = {
    maxBatch: flags.maxBatch,
    maxBatchedTokens: flags.maxBatchedTokens,
    blockSize: flags.blockSize,
    cacheBlocks: flags.cacheBlocks,
    prefixCaching: flags.prefixCaching === false ? false : undefined,
    prefillTokensPerSecond: flags.prefillTokensPerSecond,
    decodeTokensPerSecond: flags.decodeTokensPerSecond,
    batchSlowdown: flags.batchSlowdown,
    adapters: flags.lora,
    maxLoras: flags.maxLoras,
    loraLoadMs: flags.loraLoadMs,
    schedulingPolicy: flags.schedulingPolicy,
    jitter: flags.jitter,
    seed: flags.seed,
  };
  const any = flags.engine === true || Object.values(options).some((v) => v !== undefined);
  return any ? options : undefined;
}

export function registerMockWorker(program: Command): void {
  program
    .command('mock-worker')
    .description('Run an OpenAI-compatible mock engine with fault injection (a test fixture).')
    .option('-p, --port <port>', 'port to listen on (0 picks a free one)', parseIntOption(0, 65535), 8000)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('-m, --model <name...>', 'model name served, repeatable', (v: string, p: string[] | undefined) =>
      collect(v, p),
    )
    .option(
      '--tokens-per-second <n>',
      'generation speed per stream (0 = as fast as possible)',
      parseNumberOption(0),
      0,
    )
    .option('--max-tokens <n>', 'tokens generated when a request sets no max_tokens', parseIntOption(1), 16)
    .option('--fault <spec>', 'fault applied to every request without an X-Mock-Fault header')
    .option('--dp-size <n>', 'data-parallel ranks it reports', parseIntOption(1))
    .option(
      '--engine',
      'simulate an engine (batching, queue, prefix cache, /metrics); implied by any flag below',
    )
    .option(
      '--max-batch <n>',
      'engine: sequences in one batch (vLLM --max-num-seqs; default 32)',
      parseIntOption(1),
    )
    .option(
      '--max-batched-tokens <n>',
      'engine: tokens per step (vLLM --max-num-batched-tokens; default 2048)',
      parseIntOption(1),
    )
    .option('--block-size <n>', 'engine: tokens per KV-cache block (default 16)', parseIntOption(1))
    .option('--cache-blocks <n>', 'engine: KV-cache capacity in blocks (default 4096)', parseIntOption(1))
    .option('--no-prefix-caching', 'engine: no automatic prefix caching')
    .option(
      '--prefill-tokens-per-second <n>',
      'engine: prompt tokens computed per second (default 8000)',
      parseNumberOption(Number.MIN_VALUE),
    )
    .option(
      '--decode-tokens-per-second <n>',
      'engine: tokens per second of a batch of one (default 50)',
      parseNumberOption(Number.MIN_VALUE),
    )
    .option(
      '--batch-slowdown <f>',
      'engine: step time grows by this per extra sequence (default 0.02)',
      parseNumberOption(0),
    )
    .option(
      '--lora <name...>',
      'engine: LoRA adapters served as models, repeatable',
      (v: string, p: string[] | undefined) => collect(v, p),
    )
    .option(
      '--max-loras <n>',
      'engine: adapters in one batch (vLLM --max-loras; default 1)',
      parseIntOption(1),
    )
    .option(
      '--lora-load-ms <ms>',
      'engine: time to load an adapter into a slot (default 20)',
      parseNumberOption(0),
    )
    .addOption(
      new Option(
        '--scheduling-policy <policy>',
        'engine: waiting requests by arrival, or by their priority field (vLLM --scheduling-policy; default fcfs)',
      ).choices(['fcfs', 'priority']),
    )
    .option(
      '--jitter <f>',
      'engine: each step time scaled by 1 ± up to f, seeded (default 0)',
      parseNumberOption(0),
    )
    .option('--seed <n>', 'engine: seed of its PRNG (default 0)', parseIntOption(0))
    .action(async (flags: MockFlags) => {
      try {
        if (flags.fault) parseFault(flags.fault);
      } catch (err) {
        if (err instanceof FaultSpecError) throw new StartupError(`--fault: ${err.message}`, 2);
        throw err;
      }
      const engine = engineOptionsOf(flags);
      try {
        if (engine) resolveEngineOptions(engine);
      } catch (err) {
        throw new StartupError((err as Error).message, 2);
      }
      const worker = await createMockWorker({
        port: flags.port,
        host: flags.host,
        models: flags.model && flags.model.length > 0 ? flags.model : undefined,
        tokensPerSecond: flags.tokensPerSecond,
        defaultMaxTokens: flags.maxTokens,
        fault: flags.fault,
        dpSize: flags.dpSize,
        engine,
      });
      console.log(JSON.stringify({ msg: 'mock worker listening', url: worker.url }));
      onTermination(() => worker.close());
    });
}
