import type { Command } from 'commander';
import { createMockWorker, FaultSpecError, parseFault } from '../mock/mock-worker.js';
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
    .action(async (flags: MockFlags) => {
      try {
        if (flags.fault) parseFault(flags.fault);
      } catch (err) {
        if (err instanceof FaultSpecError) throw new StartupError(`--fault: ${err.message}`, 2);
        throw err;
      }
      const worker = await createMockWorker({
        port: flags.port,
        host: flags.host,
        models: flags.model && flags.model.length > 0 ? flags.model : undefined,
        tokensPerSecond: flags.tokensPerSecond,
        defaultMaxTokens: flags.maxTokens,
        fault: flags.fault,
        dpSize: flags.dpSize,
      });
      console.log(JSON.stringify({ msg: 'mock worker listening', url: worker.url }));
      onTermination(() => worker.close());
    });
}
