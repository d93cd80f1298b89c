import type { Command } from 'commander';
import { ConfigError, loadConfig } from '../config/load.js';
import { EMBEDDED_MODEL_NAME, EmbeddedWorker, ensureTinyModel } from '../engine/embedded-worker.js';
import { Gateway } from '../gateway.js';
import { createLogger } from '../observability/logger.js';
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
  adminKey?: string;
  tracingEndpoint?: string;
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
    .option('--admin-key <key>', 'the admin API key; without one the admin API is open (SLUICE_ADMIN_KEY)')
    .option(
      '--tracing-endpoint <url>',
      'turn OpenTelemetry tracing on, exporting to this OTLP/HTTP traces URL (SLUICE_TRACING_ENDPOINT)',
    )
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
      const log = createLogger(config.log.level);
      let embedded: EmbeddedWorker | undefined;
      if (config.workers.length === 0 && !config.discovery.kubernetes) {
        // Nothing configured: serve the tiny demo model on a local engine, so one command runs it.
        embedded = new EmbeddedWorker(await ensureTinyModel(config.dataDir, log), log);
        const url = await embedded.start();
        config.workers.push({ url, id: 'embedded' });
        log.warn(
          { url, model: EMBEDDED_MODEL_NAME },
          `no worker configured: serving the embedded TINY DEMO MODEL '${EMBEDDED_MODEL_NAME}' ` +
            '(random weights, its output is gibberish). Give --worker URL to serve a real engine, ' +
            'or run `sluice worker --model PATH.gguf` on any GGUF model.',
        );
      }
      const gateway = new Gateway(config, { logger: log });
      onTermination(async (signal) => {
        gateway.log.info({ signal }, 'signal received');
        await gateway.shutdown();
        await embedded?.stop();
      });
      await gateway.start();
    });
}
