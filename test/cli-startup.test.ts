import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createMockWorker } from '../src/mock/mock-worker.js';
import { startCli } from './helpers/cli.js';
import { eventually, post } from './helpers/gateway.js';

/**
 * Start-up as an operator meets it, with real CLI processes: every failure is one line and a
 * non-zero exit (never a stack trace), a worker that is down is said with its cause, and the
 * demo's printed curl works.
 */
const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-cli-'));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** Runs `sluice <args>` to its exit: the exit code and everything it wrote. */
function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** One line of `sluice: ...`, no stack frames. */
function expectOneLine(output: string, pattern: RegExp): void {
  const lines = output.trim().split('\n');
  expect(lines, output).toHaveLength(1);
  expect(lines[0]).toMatch(/^sluice: /);
  expect(lines[0]).toMatch(pattern);
  expect(output).not.toMatch(/^\s+at /m);
}

describe('start-up failures are one clear line and a non-zero exit', () => {
  it('a port in use is said at once, before the embedded engine loads its model', async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    const dataDir = tempDir();
    try {
      const { code, output } = await run(['serve', '--port', String(port), '--data-dir', dataDir]);
      expect(code).toBe(1);
      expectOneLine(output, new RegExp(`port ${port} on 127\\.0\\.0\\.1 is already in use`));
      // Nothing slow happened first: the tiny model was never written.
      expect(existsSync(join(dataDir, 'models'))).toBe(false);
    } finally {
      blocker.close();
    }
  });

  it('a worker URL without its scheme is told to add http://', async () => {
    const { code, output } = await run(['serve', '--worker', '127.0.0.1:8001', '--storage', 'none']);
    expect(code).toBe(2);
    expectOneLine(
      output,
      /workers\.0\.url: '127\.0\.0\.1:8001' lacks its scheme: write http:\/\/127\.0\.0\.1:8001/,
    );
  });

  it('a malformed Redis URL', async () => {
    const { code, output } = await run(['serve', '--worker', 'http://127.0.0.1:9', '--storage', 'none'], {
      SLUICE_REDIS_URL: 'localhost 6379',
    });
    expect(code).toBe(2);
    expectOneLine(output, /redis\.url: 'localhost 6379' is not a Redis URL/);
  });

  it('a bad mock-worker --fault spec', async () => {
    const { code, output } = await run(['mock-worker', '--port', '0', '--fault', 'reset_after:x']);
    expect(code).toBe(2);
    expectOneLine(output, /--fault: fault 'reset_after' needs a non-negative integer/);
  });
});

describe('a worker that is down at start', () => {
  it('is logged with its cause, requests for its model get 503 naming it, and it is logged when it comes back', async () => {
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const config = join(tempDir(), 'down.yaml');
    writeFileSync(
      config,
      `workers:\n  - { url: "http://127.0.0.1:${port}", id: down-0, models: [mock-model] }\nhealth: { intervalMs: 200 }\n`,
    );
    const cli = startCli(['serve', '--port', '0', '--storage', 'none', '--config', config], {
      SLUICE_LOG_FORMAT: 'json',
    });
    try {
      const url = await cli.url;
      expect(cli.output()).toMatch(/worker down-0 is down: connection refused/);
      const res = await post(`${url}/v1/chat/completions`, {
        model: 'mock-model',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(res.status).toBe(503);
      const error = (res.json() as { error: { code: string; message: string } }).error;
      expect(error.code).toBe('no_worker_available');
      expect(error.message).toContain('connection refused');
      const worker = await createMockWorker({ port });
      try {
        await eventually(() => cli.output().includes('worker down-0 is back'), 10_000);
        const ok = await post(`${url}/v1/chat/completions`, {
          model: 'mock-model',
          messages: [{ role: 'user', content: 'hi' }],
        });
        expect(ok.status).toBe(200);
      } finally {
        await worker.close();
      }
    } finally {
      cli.child.kill('SIGKILL');
    }
  });
});

describe('logs and the demo', () => {
  it('--log-format pretty writes readable lines, json writes JSON', async () => {
    const pretty = startCli([
      'serve',
      '--port',
      '0',
      '--storage',
      'none',
      '--worker',
      'http://127.0.0.1:9',
      '--log-format',
      'pretty',
    ]);
    try {
      await eventually(() => /INFO: sluice gateway listening/.test(pretty.output()), 15_000);
      expect(pretty.output()).not.toMatch(/^\{"level"/m);
    } finally {
      pretty.child.kill('SIGKILL');
    }
    const json = startCli([
      'serve',
      '--port',
      '0',
      '--storage',
      'none',
      '--worker',
      'http://127.0.0.1:9',
      '--log-format',
      'json',
    ]);
    try {
      await json.url;
      expect(json.output()).toMatch(/^\{"level":30,/m);
    } finally {
      json.child.kill('SIGKILL');
    }
  });

  it('sluice demo uses a fresh data directory and its printed curl works', async () => {
    const demo = startCli(['demo', '--port', '0']);
    try {
      await eventually(
        () => /Try:\n {2}curl -N (\S+) -H 'content-type: application\/json' -d '(.*)'\n/.test(demo.output()),
        15_000,
      );
      const [, url, body] = /curl -N (\S+) -H 'content-type: application\/json' -d '(.*)'\n/.exec(
        demo.output(),
      )!;
      expect(demo.output()).toMatch(/files in \S*sluice-demo-/);
      const res = await post(url!, JSON.parse(body!));
      expect(res.status).toBe(200);
      expect(res.text).toContain('data: [DONE]');
    } finally {
      demo.child.kill('SIGKILL');
    }
  });
});
