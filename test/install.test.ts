import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, symlinkSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually } from './helpers/gateway.js';

/**
 * The operators' install path, as on a fresh machine: `npm pack`, `npm install -g` of the
 * tarball (into a prefix of its own), then the installed `sluice serve` answers a chat request
 * from its embedded engine. Slow (an install of every dependency), so it runs once.
 */
describe('npm pack + npm install -g + sluice serve', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-install-'));
  let server: ChildProcess | undefined;
  // The installed tree is large: removing it takes a while on a busy machine.
  afterAll(async () => {
    server?.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }, 120_000);

  it('installs from the tarball and serves the embedded model', { timeout: 420_000 }, async () => {
    // Built from this checkout's sources in a copy of its own: a dist/ left in the checkout (an
    // older build, files of sources since removed) is never what gets packed.
    const source = join(dir, 'source');
    for (const entry of [
      'package.json',
      'package-lock.json',
      'README.md',
      'src',
      'tsconfig.json',
      'tsconfig.build.json',
    ])
      cpSync(entry, join(source, entry), { recursive: true });
    symlinkSync(join(process.cwd(), 'node_modules'), join(source, 'node_modules'), 'dir');
    execFileSync('npm', ['run', 'build'], { cwd: source, stdio: 'ignore' });
    const packed = execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], {
      cwd: source,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    })
      .trim()
      .split('\n')
      .at(-1)!;
    const prefix = join(dir, 'prefix');
    execFileSync(
      'npm',
      ['install', '-g', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund', join(dir, packed)],
      { stdio: 'ignore', timeout: 360_000 },
    );
    const bin = join(prefix, 'bin', 'sluice');
    expect(existsSync(bin)).toBe(true);
    expect(execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim()).toMatch(/^\d+\.\d+\.\d+$/);

    let output = '';
    server = spawn(bin, ['serve', '--port', '0', '--data-dir', join(dir, 'data')], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, SLUICE_LOG_FORMAT: 'json' },
    });
    server.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    server.stderr!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    let url = '';
    await eventually(() => {
      url = /"url":"(http:\/\/127\.0\.0\.1:\d+)","workers"/.exec(output)?.[1] ?? '';
      return url !== '';
    }, 90_000);
    const ask = (stream: boolean) =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'sluice-tiny',
          max_tokens: 8,
          stream,
          messages: [{ role: 'user', content: 'hi' }],
        }),
      });
    const res = await ask(false);
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      model: string;
      choices: { message: { role: string; content: string }; finish_reason: string }[];
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    // An answer of the embedded engine (llama.cpp on the tiny model): text, a real finish, its usage.
    expect(body.model).toBe('sluice-tiny');
    expect(body.choices[0]!.message.role).toBe('assistant');
    expect(body.choices[0]!.message.content.length).toBeGreaterThan(0);
    expect(['stop', 'length']).toContain(body.choices[0]!.finish_reason);
    expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
    expect(body.usage.completion_tokens).toBeLessThanOrEqual(8);
    // And a stream of it, to its end.
    const streamed = await (await ask(true)).text();
    expect(streamed.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(streamed).toContain('"finish_reason":"');
  });
});
