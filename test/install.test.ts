import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
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
    if (!existsSync('dist/cli/main.js')) execFileSync('npm', ['run', 'build'], { stdio: 'ignore' });
    const packed = execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], {
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
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sluice-tiny',
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: { message: { content: string } }[] };
    expect(typeof body.choices[0]!.message.content).toBe('string');
  });
});
