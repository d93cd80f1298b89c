import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/load.js';

const run = promisify(execFile);
const cli = (args: string[], env: Record<string, string> = {}) =>
  run(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
    env: { ...process.env, ...env },
    timeout: 15_000,
  }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({
      code: e.code,
      stdout: e.stdout,
      stderr: e.stderr,
    }),
  );

function yamlFile(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-config-'));
  const file = join(dir, 'sluice.yaml');
  writeFileSync(file, text);
  return file;
}

describe('configuration', () => {
  it('layers file < environment < flags', () => {
    const file = yamlFile(
      [
        'server: { port: 9000, host: 0.0.0.0 }',
        'routing: { policy: random }',
        'workers:',
        '  - url: http://127.0.0.1:7001',
        '    maxConcurrent: 4',
        'models:',
        '  m1: { policy: cache_aware, timeouts: { idleMs: 1500 } }',
      ].join('\n'),
    );
    const fromFile = loadConfig({ config: file }, {});
    expect(fromFile.server).toMatchObject({ port: 9000, host: '0.0.0.0' });
    expect(fromFile.workers).toEqual([{ url: 'http://127.0.0.1:7001', maxConcurrent: 4 }]);
    expect(fromFile.models.m1?.timeouts?.idleMs).toBe(1500);
    const withEnv = loadConfig({ config: file }, { SLUICE_PORT: '9100', SLUICE_POLICY: 'power_of_two' });
    expect(withEnv.server.port).toBe(9100);
    expect(withEnv.routing.policy).toBe('power_of_two');
    const withFlags = loadConfig(
      { config: file, port: 9200, worker: ['http://127.0.0.1:7002'] },
      { SLUICE_PORT: '9100', SLUICE_CONFIG: '/nonexistent' },
    );
    expect(withFlags.server.port).toBe(9200);
    expect(withFlags.workers).toEqual([{ url: 'http://127.0.0.1:7002' }]);
    const envFile = loadConfig({}, { SLUICE_CONFIG: file, SLUICE_WORKERS: 'http://a:1, http://b:2' });
    expect(envFile.workers.map((w) => w.url)).toEqual(['http://a:1', 'http://b:2']);
  });

  it('names every bad value', () => {
    const file = yamlFile('routing: { policy: fastest }\nworkers: [{ url: ftp://x }]\nbogus: 1\n');
    let error: unknown;
    try {
      loadConfig({ config: file }, {});
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as Error).message;
    expect(message).toContain('routing.policy');
    expect(message).toContain('round_robin');
    expect(message).toContain('workers.0.url');
    expect(message).toContain('bogus');
    expect(() => loadConfig({}, { SLUICE_PORT: 'eighty' })).toThrow(/SLUICE_PORT=eighty is not a number/);
    expect(() => loadConfig({ config: '/no/such/file.yaml' }, {})).toThrow(/Cannot read config file/);
    expect(() => loadConfig({ config: yamlFile('a: [') }, {})).toThrow(/not valid YAML/);
  });

  it('takes WebSocket allowed origins as origins (normalised), refusing a URL with a path', () => {
    const file = yamlFile(
      'responses: { websocket: { allowedOrigins: [HTTPS://App.Example/, "http://127.0.0.1:3000"] } }',
    );
    expect(loadConfig({ config: file }, {}).responses.websocket.allowedOrigins).toEqual([
      'https://app.example',
      'http://127.0.0.1:3000',
    ]);
    const bad = yamlFile(
      'responses: { websocket: { allowedOrigins: [https://app.example/page, app.example] } }',
    );
    expect(() => loadConfig({ config: bad }, {})).toThrow(/allowedOrigins\.0[\s\S]*allowedOrigins\.1/);
    expect(loadConfig({}, {}).responses.websocket).toMatchObject({
      allowedOrigins: [],
      maxConnections: 1024,
      maxConnectionsPerClient: 64,
    });
    expect(loadConfig({}, {}).files.pdf).toEqual({
      timeoutMs: 10_000,
      maxMemoryMb: 256,
      concurrency: 2,
      maxQueued: 64,
      cacheMb: 64,
    });
  });
});

describe('command line', () => {
  it('has --help for each command', async () => {
    const top = await cli(['--help']);
    expect(top.stdout).toContain('serve');
    expect(top.stdout).toContain('mock-worker');
    const serve = await cli(['serve', '--help']);
    for (const flag of ['--config', '--port', '--worker', '--policy']) expect(serve.stdout).toContain(flag);
    const mock = await cli(['mock-worker', '--help']);
    for (const flag of ['--port', '--model', '--tokens-per-second', '--fault'])
      expect(mock.stdout).toContain(flag);
  });

  it('refuses a bad flag or value with a clear message and exit code', async () => {
    const port = await cli(['serve', '--port', 'abc']);
    expect(port.code).not.toBe(0);
    expect(port.stderr).toMatch(/--port.*expected an integer/);
    const policy = await cli(['serve', '--worker', 'http://127.0.0.1:1', '--policy', 'fastest']);
    expect(policy.code).toBe(2);
    expect(policy.stderr).toContain('routing.policy');
    const env = await cli(['serve', '--worker', 'http://127.0.0.1:1'], { SLUICE_IDLE_TIMEOUT_MS: '-5' });
    expect(env.code).toBe(2);
    expect(env.stderr).toContain('timeouts.idleMs');
  });
});
