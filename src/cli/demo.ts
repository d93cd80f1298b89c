import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { parseConfig } from '../config/load.js';
import { Gateway } from '../gateway.js';
import { createMockWorker, type MockWorker } from '../mock/mock-worker.js';
import { parseIntOption } from './options.js';
import { onTermination } from './signals.js';
import { assertPortFree } from './startup.js';

export function registerDemo(program: Command): void {
  program
    .command('demo')
    .description('Run the gateway in front of two in-process mock workers (no engine needed).')
    .option('-p, --port <port>', 'gateway port', parseIntOption(0, 65535), 8080)
    .option('--tokens-per-second <n>', 'mock generation speed', parseIntOption(0), 20)
    .option(
      '--data-dir <dir>',
      'where the demo keeps its files (default: a fresh temporary directory, so it never shares keys with `sluice serve`)',
    )
    .action(async (flags: { port: number; tokensPerSecond: number; dataDir?: string }) => {
      await assertPortFree('127.0.0.1', flags.port);
      const dataDir = flags.dataDir ?? mkdtempSync(join(tmpdir(), 'sluice-demo-'));
      const workers: MockWorker[] = [];
      for (let i = 0; i < 2; i++) {
        workers.push(
          await createMockWorker({ models: ['mock-model'], tokensPerSecond: flags.tokensPerSecond }),
        );
      }
      const gateway = new Gateway(
        parseConfig({
          server: { port: flags.port, forwardHeaders: ['traceparent', 'tracestate', 'x-mock-*'] },
          workers: workers.map((w) => ({ url: w.url })),
          health: { intervalMs: 1000 },
          dataDir,
        }),
      );
      onTermination(async () => {
        await gateway.shutdown(2_000);
        await Promise.all(workers.map((w) => w.close()));
      });
      const url = await gateway.start();
      console.log(
        `\nsluice demo: gateway at ${url} in front of two mock workers (${workers.map((w) => w.url).join(', ')}); files in ${dataDir}.\n` +
          `Try:\n  curl -N ${url}/v1/chat/completions -H 'content-type: application/json' ` +
          `-d '{"model":"mock-model","stream":true,"messages":[{"role":"user","content":"hello"}]}'\n`,
      );
    });
}
