import type { Command } from 'commander';
import { ConfigError, loadConfig } from '../config/load.js';
import { Gateway } from '../gateway.js';
import { POLICY_NAMES } from '../routing/types.js';
import { collect, parseIntOption } from './options.js';
import { onTermination } from './signals.js';

interface ServeFlags {
  config?: string;
  host?: string;
  port?: number;
  worker?: string[];
  policy?: string;
  logLevel?: string;
  dataDir?: string;
  storage?: string;
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('Run the gateway in front of OpenAI-compatible workers.')
    .option('-c, --config <file>', 'YAML configuration file (also SLUICE_CONFIG)')
    .option('--host <host>', 'address to listen on (default 127.0.0.1; SLUICE_HOST)')
    .option('-p, --port <port>', 'port to listen on (default 8080; SLUICE_PORT)', parseIntOption(0, 65535))
    .option(
      '-w, --worker <url...>',
      'worker base URL, repeatable or comma-separated (SLUICE_WORKERS)',
      (value: string, previous: string[] | undefined) => collect(value, previous),
    )
    .option('--policy <name>', `default routing policy: ${POLICY_NAMES.join(', ')} (SLUICE_POLICY)`)
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (SLUICE_LOG_LEVEL)')
    .option('--data-dir <dir>', 'where the gateway keeps its files (default ~/.sluice; SLUICE_DATA_DIR)')
    .option('--storage <kind>', 'response storage: sqlite, postgres or none (SLUICE_STORAGE)')
    .action(async (flags: ServeFlags) => {
      let config: ReturnType<typeof loadConfig>;
      try {
        config = loadConfig(flags);
      } catch (err) {
        if (err instanceof ConfigError) {
          console.error(`sluice: ${err.message}`);
          process.exit(2);
        }
        throw err;
      }
      if (config.workers.length === 0) {
        console.error(
          'sluice: no worker configured. Give --worker URL, SLUICE_WORKERS, or `workers:` in the config file ' +
            '(try `sluice demo` for a gateway in front of two mock workers).',
        );
        process.exit(2);
      }
      const gateway = new Gateway(config);
      onTermination(async (signal) => {
        gateway.log.info({ signal }, 'signal received');
        await gateway.shutdown();
      });
      await gateway.start();
    });
}
