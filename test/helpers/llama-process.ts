import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type TinyModelOptions, writeTinyModel } from '../../src/engine/tiny-model.js';

const CLI = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

export interface LlamaStats {
  requests: number;
  inflight: number;
  queued: number;
  aborted: number;
  completed: number;
}

/** A real `sluice worker --engine llama-cpp` process on the tiny model: it can be killed, stopped, restarted. */
export class LlamaProcess {
  child: ChildProcess | undefined;
  url = '';

  constructor(
    readonly modelPath: string,
    private port = 0,
    private readonly slots = 4,
  ) {}

  /** The tiny model (seed 7); `endless` for answers that never end by themselves. */
  static async tinyModel(options: Omit<TinyModelOptions, 'seed'> = {}): Promise<string> {
    const path = join(mkdtempSync(join(tmpdir(), 'sluice-chaos-')), 'tiny.gguf');
    await writeTinyModel(path, { ...options, seed: 7 });
    return path;
  }

  get pid(): number {
    return this.child!.pid!;
  }

  /** Starts (or restarts, on the same port) and resolves once it is listening. */
  async start(): Promise<string> {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        CLI,
        'worker',
        '--model',
        this.modelPath,
        '--model-name',
        'tiny',
        '--port',
        String(this.port),
        '--slots',
        String(this.slots),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.child = child;
    let output = '';
    this.url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`worker did not start: ${output}`)), 60_000);
      child.stdout!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const match = /"url":"(http:\/\/[^"]+)"/.exec(output);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]!);
        }
      });
      child.stderr!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`worker exited with ${code}: ${output}`));
      });
    });
    this.port = Number(new URL(this.url).port);
    return this.url;
  }

  async stats(): Promise<LlamaStats> {
    return (await (await fetch(`${this.url}/worker/stats`)).json()) as LlamaStats;
  }

  signal(signal: NodeJS.Signals): void {
    this.child?.kill(signal);
  }

  /** kill -9, and wait until the process is gone. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }
}
