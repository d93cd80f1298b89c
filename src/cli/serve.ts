import cluster from 'node:cluster';
import type { Command } from 'commander';
import { ClusterScrapeClient } from '../cluster/metrics-ipc.js';
import { announceListening, ClusterPrimary } from '../cluster/primary.js';
import { ConfigError, loadConfig } from '../config/load.js';
import type { SluiceConfig } from '../config/schema.js';
import { EMBEDDED_MODEL_NAME, EmbeddedWorker, ensureTinyModel } from '../engine/embedded-worker.js';
import { Gateway, openStore } from '../gateway.js';
import { createLogger, type Logger } from '../observability/logger.js';
import { POLICY_NAMES } from '../routing/types.js';
import { keepServingOnUnhandledRejection } from './last-resort.js';
import { collect, parseIntOption } from './options.js';
import { onTermination } from './signals.js';
import { assertPortFree } from './startup.js';
import { startupFailureLine } from './startup-failure.js';

interface ServeFlags {
  config?: string;
  host?: string;
  port?: number;
  worker?: string[];
  policy?: string;
  logLevel?: string;
  logFormat?: string;
  dataDir?: string;
  storage?: string;
  adminKey?: string;
  processes?: number;
  tracingEndpoint?: string;
}

/** Tells a cluster process the URL of the embedded engine its primary runs. */
const EMBEDDED_URL_ENV = 'SLUICE_EMBEDDED_WORKER_URL';
const EMBEDDED_ID = 'embedded';

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description(
      'Run the gateway in front of OpenAI-compatible workers. With none configured (no --worker, no ' +
        'config, no discovery), it starts an embedded llama.cpp engine serving the tiny demo model ' +
        `'sluice-tiny' (random weights, gibberish output), so that one command runs it.`,
    )
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
    .option(
      '--log-format <format>',
      'pretty (coloured lines; the default on a terminal) or json (the default otherwise) (SLUICE_LOG_FORMAT)',
    )
    .option('--data-dir <dir>', 'where the gateway keeps its files (default ~/.sluice; SLUICE_DATA_DIR)')
    .option('--storage <kind>', 'response storage: sqlite, postgres or none (SLUICE_STORAGE)')
    .option('--admin-key <key>', 'the admin API key; without one the admin API is open (SLUICE_ADMIN_KEY)')
    .option(
      '--processes <n>',
      'gateway processes sharing the port, e.g. one per core (default 1; SLUICE_PROCESSES)',
      parseIntOption(1, 256),
    )
    .option(
      '--tracing-endpoint <url>',
      'turn OpenTelemetry tracing on, exporting to this OTLP/HTTP traces URL (SLUICE_TRACING_ENDPOINT)',
    )
    .action(async (flags: ServeFlags) => {
      let config: SluiceConfig;
      try {
        config = loadConfig(flags);
      } catch (err) {
        if (err instanceof ConfigError) {
          console.error(`sluice: ${err.message}`);
          process.exit(2);
        }
        throw err;
      }
      const log = createLogger(config.log.level, undefined, config.log.format);
      keepServingOnUnhandledRejection(log);
      if (cluster.isWorker) return serveClusterProcess(config, log);
      // Before the embedded engine loads its model: a port in use is known in a millisecond.
      await assertPortFree(config.server.host, config.server.port);
      const embedded = await startEmbeddedIfNone(config, log);
      if (config.server.processes > 1) return serveCluster(config, log, embedded);
      try {
        const gateway = new Gateway(config, { logger: log });
        onTermination(async (signal) => {
          gateway.log.info({ signal }, 'signal received');
          await gateway.shutdown();
          await embedded?.stop();
        });
        await gateway.start();
      } catch (err) {
        await failStart(err, config, embedded);
      }
    });
}

/** The gateway could not start: one line naming the problem, the embedded engine stopped, exit 1. */
async function failStart(err: unknown, config: SluiceConfig, embedded?: EmbeddedWorker): Promise<never> {
  console.error(startupFailureLine(err, config));
  await embedded?.stop();
  process.exit(1);
}

/** Nothing configured: serve the tiny demo model on a local engine, so one command runs it. */
async function startEmbeddedIfNone(config: SluiceConfig, log: Logger): Promise<EmbeddedWorker | undefined> {
  if (config.workers.length > 0 || config.discovery.kubernetes) return undefined;
  const embedded = new EmbeddedWorker(await ensureTinyModel(config.dataDir, log), log);
  const url = await embedded.start();
  config.workers.push({ url, id: EMBEDDED_ID });
  log.warn(
    { url, model: EMBEDDED_MODEL_NAME },
    `no worker configured: serving the embedded TINY DEMO MODEL '${EMBEDDED_MODEL_NAME}' ` +
      '(random weights, its output is gibberish). Give --worker URL to serve a real engine, ' +
      'or run `sluice worker --model PATH.gguf` on any GGUF model.',
  );
  return embedded;
}

/** The primary of `--processes N`: one embedded engine and one migration for all, then N gateways. */
async function serveCluster(config: SluiceConfig, log: Logger, embedded: EmbeddedWorker | undefined) {
  const store = openStore(config);
  if (store) {
    try {
      await store.migrate();
    } catch (err) {
      await store.close().catch(() => undefined);
      await failStart(err, config, embedded);
    }
    await store.close();
  }
  const embeddedUrl = embedded ? config.workers.find((w) => w.id === EMBEDDED_ID)?.url : undefined;
  const primary = new ClusterPrimary({
    processes: config.server.processes,
    env: embeddedUrl ? { [EMBEDDED_URL_ENV]: embeddedUrl } : {},
    graceMs: config.server.shutdownGraceMs,
    log,
  });
  onTermination(async (signal) => {
    log.info({ signal }, 'signal received: stopping the gateway processes');
    await primary.stop();
    await embedded?.stop();
  });
  try {
    const url = await primary.start();
    log.info({ url, processes: config.server.processes }, 'sluice cluster listening');
  } catch (err) {
    log.fatal({ err: (err as Error).message }, 'the gateway processes could not start');
    await embedded?.stop();
    process.exit(1);
  }
}

/** One process of a cluster: a whole gateway, whose /metrics answers for every process. */
async function serveClusterProcess(config: SluiceConfig, log: Logger): Promise<void> {
  const embeddedUrl = process.env[EMBEDDED_URL_ENV];
  if (embeddedUrl) config.workers.push({ url: embeddedUrl, id: EMBEDDED_ID });
  // Every line says which process wrote it.
  const gateway = new Gateway(config, { logger: log.child({ pid: process.pid }) });
  gateway.context.metrics.scrape = new ClusterScrapeClient(gateway.context.metrics.registry).scrape;
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= gateway.shutdown();
    return stopping;
  };
  onTermination(async (signal) => {
    gateway.log.info({ signal, pid: process.pid }, 'signal received');
    await stop();
  }, 'ignore');
  // The primary is gone (killed): nobody hands this process connections any more.
  process.once('disconnect', () => {
    void stop().then(() => process.exit(0));
  });
  try {
    announceListening(await gateway.start());
  } catch (err) {
    await failStart(err, config);
  }
}
