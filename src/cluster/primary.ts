import cluster, { type Worker } from 'node:cluster';
import type { Logger } from '../observability/logger.js';
import { serveClusterScrapes } from './metrics-ipc.js';

const LISTENING = 'sluice:listening';
/** More crashes than this per process within a minute stops the cluster instead of restarting. */
const CRASHES_PER_PROCESS_PER_MINUTE = 5;
const RESTART_DELAY_MS = 1_000;

export interface ClusterOptions {
  processes: number;
  /** Added to each process's environment. */
  env: Record<string, string>;
  /** How long a process may drain on SIGTERM before it is killed. */
  graceMs: number;
  log: Logger;
}

/** Called by a cluster process once its gateway listens. */
export function announceListening(url: string): void {
  process.send?.({ type: LISTENING, url });
}

function listeningUrl(message: unknown): string | undefined {
  if (typeof message !== 'object' || message === null) return undefined;
  const { type, url } = message as { type?: unknown; url?: unknown };
  return type === LISTENING && typeof url === 'string' ? url : undefined;
}

/**
 * `sluice serve --processes N`: N gateway processes on one port (node:cluster hands each new
 * connection to the next process). The primary serves no request: it starts the processes,
 * restarts one that dies (boundedly), answers their cluster-wide metric scrapes, and on stop
 * lets each drain as a single gateway would.
 */
export class ClusterPrimary {
  private started = false;
  private stopping = false;
  private crashes: number[] = [];

  constructor(private readonly options: ClusterOptions) {}

  /** Resolves with the URL once every process listens. */
  async start(): Promise<string> {
    serveClusterScrapes();
    cluster.on('exit', (worker, code, signal) => this.onExit(worker, code, signal));
    try {
      const urls = await Promise.all(Array.from({ length: this.options.processes }, () => this.fork()));
      this.started = true;
      return urls[0]!;
    } catch (err) {
      await this.stop();
      throw err;
    }
  }

  /** SIGTERM to every process (each drains), SIGKILL to any still there after the grace. */
  async stop(): Promise<void> {
    this.stopping = true;
    const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
    await Promise.all(
      workers.map(
        (worker) =>
          new Promise<void>((resolve) => {
            if (worker.isDead()) return resolve();
            const timer = setTimeout(() => worker.process.kill('SIGKILL'), this.options.graceMs + 5_000);
            worker.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            worker.process.kill('SIGTERM');
          }),
      ),
    );
  }

  private fork(): Promise<string> {
    const worker = cluster.fork(this.options.env);
    return new Promise((resolve, reject) => {
      const onMessage = (message: unknown) => {
        const url = listeningUrl(message);
        if (url === undefined) return;
        worker.off('exit', onExit);
        worker.off('message', onMessage);
        resolve(url);
      };
      const onExit = (code: number | null) => {
        worker.off('message', onMessage);
        reject(new Error(`gateway process ${worker.process.pid} exited (${code}) before listening`));
      };
      worker.on('message', onMessage);
      worker.once('exit', onExit);
    });
  }

  private onExit(worker: Worker, code: number | null, signal: string | null): void {
    if (this.stopping || !this.started) return;
    const { log, processes } = this.options;
    const now = Date.now();
    this.crashes = this.crashes.filter((at) => now - at < 60_000);
    this.crashes.push(now);
    if (this.crashes.length > CRASHES_PER_PROCESS_PER_MINUTE * processes) {
      log.fatal({ pid: worker.process.pid, code, signal }, 'gateway processes keep dying: stopping');
      void this.stop().then(() => process.exit(1));
      return;
    }
    log.error({ pid: worker.process.pid, code, signal }, 'gateway process died: starting another');
    setTimeout(() => {
      if (this.stopping) return;
      this.fork().catch((err: Error) => log.error({ err: err.message }, 'gateway process failed to start'));
    }, RESTART_DELAY_MS);
  }
}
