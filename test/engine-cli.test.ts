import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeTinyModel } from '../src/engine/tiny-model.js';

/** `sluice worker` and `sluice model make-tiny` as real processes. */

const root = fileURLToPath(new URL('..', import.meta.url));
const entry = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

interface Run {
  child: ChildProcess;
  output: () => string;
  exit: Promise<number | null>;
}

// Each process starts tsx and node-llama-cpp (which tests its binary in a child process): slow on a busy host.
describe('the worker and model commands as processes', { timeout: 60_000 }, () => {
  let dir: string;

  const run = (args: string[]): Run => {
    const child = spawn(process.execPath, ['--import', 'tsx', entry, ...args], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout!.on('data', (c: Buffer) => {
      output += c.toString();
    });
    child.stderr!.on('data', (c: Buffer) => {
      output += c.toString();
    });
    const exit = once(child, 'exit').then(([code]) => code as number | null);
    return { child, output: () => output, exit };
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-engine-cli-'));
    await writeTinyModel(join(dir, 'served.gguf'), { seed: 1 });
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('make-tiny writes a model and says where', async () => {
    const out = join(dir, 'tiny.gguf');
    const made = run(['model', 'make-tiny', out, '--seed', '3']);
    expect(await made.exit).toBe(0);
    const line = JSON.parse(made.output().trim()) as { path: string; bytes: number };
    expect(line.path).toBe(out);
    expect((await stat(out)).size).toBe(line.bytes);
  });

  it('worker exits 2 with a clear message on a missing or invalid model file', async () => {
    const notGguf = join(dir, 'not-a-model.gguf');
    await writeFile(notGguf, 'hello');
    const missing = run(['worker', '--engine', 'llama-cpp', '--model', join(dir, 'missing.gguf')]);
    const invalid = run(['worker', '--model', notGguf]);
    expect(await missing.exit).toBe(2);
    expect(missing.output()).toMatch(/cannot read model file .*missing\.gguf/);
    expect(await invalid.exit).toBe(2);
    expect(invalid.output()).toMatch(/not a GGUF file/);
  });

  it('worker serves the model, prints its url, and exits on SIGTERM', async () => {
    const model = join(dir, 'served.gguf');
    const worker = run([
      'worker',
      '--model',
      model,
      '--port',
      '0',
      '--slots',
      '1',
      '--model-name',
      'cli-tiny',
    ]);
    try {
      const url = await new Promise<string>((resolve, reject) => {
        worker.child.stdout!.on('data', () => {
          const match = /"url":"(http:\/\/[^"]+)"/.exec(worker.output());
          if (match) resolve(match[1]!);
        });
        void worker.exit.then((code) => reject(new Error(`exited with ${code}: ${worker.output()}`)));
      });
      const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual(['cli-tiny']);
      const answer = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'cli-tiny', prompt: 'Hi', max_tokens: 3 }),
      });
      expect(
        ((await answer.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens,
      ).toBe(3);
      worker.child.kill('SIGTERM');
      expect(await worker.exit).toBe(0);
    } finally {
      worker.child.kill('SIGKILL');
    }
  });
});
