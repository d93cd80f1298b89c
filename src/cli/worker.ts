import { type Command, Option } from 'commander';
import { ModelFileError } from '../engine/llama-engine.js';
import { createLlamaWorker } from '../engine/llama-worker.js';
import { parseIntOption } from './options.js';
import { onTermination } from './signals.js';

interface WorkerFlags {
  engine: 'llama-cpp';
  model: string;
  port: number;
  host: string;
  slots: number;
  modelName?: string;
  contextSize?: number;
  threads?: number;
  exitWithParent?: boolean;
}

export function registerWorker(program: Command): void {
  program
    .command('worker')
    .description('Run an OpenAI-compatible inference engine on a local GGUF model (llama.cpp, CPU).')
    .addOption(
      new Option('--engine <engine>', 'inference engine').choices(['llama-cpp']).default('llama-cpp'),
    )
    .requiredOption('-m, --model <path>', 'GGUF model file')
    .option('-p, --port <port>', 'port to listen on (0 picks a free one)', parseIntOption(0, 65535), 8000)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--slots <n>', 'requests generated at once; more wait in a queue', parseIntOption(1, 256), 4)
    .option('--model-name <name>', 'model name served (default: the file name without .gguf)')
    .option('--context-size <n>', 'tokens per slot (default: the model’s, at most 4096)', parseIntOption(16))
    .option('--threads <n>', 'CPU threads per decode step (default 1)', parseIntOption(1, 1024))
    .addOption(
      new Option('--exit-with-parent', 'exit when standard input closes (the parent died)').hideHelp(),
    )
    .action(async (flags: WorkerFlags) => {
      try {
        const worker = await createLlamaWorker({
          modelPath: flags.model,
          port: flags.port,
          host: flags.host,
          slots: flags.slots,
          modelName: flags.modelName,
          contextSize: flags.contextSize,
          threads: flags.threads,
        });
        console.log(
          JSON.stringify({
            msg: 'worker listening',
            url: worker.url,
            model: worker.modelName,
            engine: flags.engine,
            slots: flags.slots,
            loadMs: Math.round(worker.loadMs),
          }),
        );
        onTermination(() => worker.close());
        if (flags.exitWithParent) {
          // The embedded worker of a gateway: never outlive it, even when it was killed with SIGKILL.
          process.stdin.resume();
          process.stdin.once('end', () => void worker.close().finally(() => process.exit(0)));
        }
      } catch (err) {
        if (!(err instanceof ModelFileError)) throw err;
        console.error(`sluice worker: ${err.message}`);
        process.exit(2);
      }
    });
}
