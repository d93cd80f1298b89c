import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from '../observability/logger.js';
import { encodeTinyModel } from './tiny-model.js';

export const EMBEDDED_MODEL_NAME = 'sluice-tiny';
const RESTART_DELAY_MS = 1_000;
const START_TIMEOUT_MS = 60_000;

/** How to run this program's own CLI: the built file, or the TypeScript source under tsx. */
function cliCommand(): string[] {
  const built = fileURLToPath(new URL('../cli/main.js', import.meta.url));
  if (existsSync(built)) return [built];
  return ['--import', 'tsx', fileURLToPath(new URL('../cli/main.ts', import.meta.url))];
}

/**
 * The tiny demo model in the data directory, written on first use, and written again when the
 * file is not the exact bytes this version of sluice writes (a model from an older version, e.g.
 * one whose answers never end, or a damaged file). Building it takes a few tens of ms.
 */
export async function ensureTinyModel(dataDir: string, log: Logger): Promise<string> {
  const path = join(dataDir, 'models', `${EMBEDDED_MODEL_NAME}.gguf`);
  const bytes = encodeTinyModel({ seed: 1 });
  const existing = existsSync(path) ? await readFile(path).catch(() => undefined) : undefined;
  if (existing?.equals(bytes)) return path;
  mkdirSync(dirname(path), { recursive: true });
  // Written aside, then renamed: a worker never loads a half-written file.
  const partial = `${path}.${process.pid}.partial`;
  await writeFile(partial, bytes);
  await rename(partial, path);
  log.info({ path, replaced: existing !== undefined }, 'wrote the tiny demo model');
  return path;
}

/**
 * The local engine of `sluice serve` with no worker configured: a `sluice worker` child
 * process on the tiny model, restarted on the same port if it dies (the gateway's health
 * checks take it out and bring it back, like any worker). A separate process, so that a
 * crash in native inference code never takes the gateway down.
 */
export class EmbeddedWorker {
  private child: ChildProcess | undefined;
  private stopping = false;
  private port = 0;
  url = '';

  constructor(
    private readonly modelPath: string,
    private readonly log: Logger,
    private readonly slots = 4,
  ) {}

  async start(): Promise<string> {
    this.url = await this.spawnOnce();
    this.port = Number(new URL(this.url).port);
    return this.url;
  }

  private spawnOnce(): Promise<string> {
    const args = [
      ...cliCommand(),
      'worker',
      '--engine',
      'llama-cpp',
      '--model',
      this.modelPath,
      '--model-name',
      EMBEDDED_MODEL_NAME,
      '--port',
      String(this.port),
      '--slots',
      String(this.slots),
      '--exit-with-parent',
    ];
    // Its stdin is a pipe from this process: when this process dies, the worker sees EOF and exits.
    const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    return new Promise<string>((resolve, reject) => {
      let output = '';
      const timer = setTimeout(
        () => reject(new Error(`the embedded worker did not start: ${output}`)),
        START_TIMEOUT_MS,
      );
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        const match = /"url":"(http:\/\/[^"]+)"/.exec(output);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]!);
        }
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`the embedded worker exited (${signal ?? code}): ${output}`));
        if (this.stopping) return;
        this.log.warn({ code, signal }, 'the embedded worker exited; restarting it');
        setTimeout(() => {
          if (this.stopping) return;
          this.spawnOnce().then(
            () => this.log.info({ url: this.url }, 'the embedded worker is back'),
            (err: unknown) => this.log.error({ err }, 'the embedded worker did not restart'),
          );
        }, RESTART_DELAY_MS).unref();
      });
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }
}
