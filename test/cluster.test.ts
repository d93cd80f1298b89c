import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMockWorker, type MockWorker } from '../src/mock/mock-worker.js';
import { startCli } from './helpers/cli.js';
import { chatBody, eventually } from './helpers/gateway.js';

/** One request on a connection of its own, so that the cluster may hand it to any process. */
async function send(url: string, method: 'GET' | 'POST', path: string, body?: unknown) {
  const res = await request(`${url}${path}`, {
    method,
    reset: true,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, text };
}

function counter(metrics: string, name: string): number {
  let sum = 0;
  for (const line of metrics.split('\n')) if (line.startsWith(name)) sum += Number(line.split(' ').at(-1));
  return sum;
}

const pidsThatServed = (output: string) =>
  new Set([...output.matchAll(/"pid":(\d+)[^\n]*"msg":"request ended"/g)].map((m) => m[1]));

/** `sluice serve --processes 2`: two gateway processes on one port, from the CLI, as a user runs it. */
describe('cluster mode', () => {
  let mock: MockWorker;
  let dataDir: string;
  beforeAll(async () => {
    mock = await createMockWorker({ tokensPerSecond: 0 });
    dataDir = await mkdtemp(join(tmpdir(), 'sluice-cluster-'));
  });
  afterAll(async () => {
    await mock.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('serves from every process, shares SQLite storage and one /metrics, restarts a dead process, stops on SIGTERM', async () => {
    const proc = startCli(
      ['serve', '--port', '0', '--worker', mock.url, '--processes', '2', '--data-dir', dataDir],
      { SLUICE_SHUTDOWN_GRACE_MS: '500' },
    );
    try {
      const url = await proc.url;
      await eventually(() => proc.output().includes('sluice cluster listening'), 20_000);

      const requests = 16;
      for (let i = 0; i < requests; i++) {
        const res = await send(url, 'POST', '/v1/chat/completions', chatBody());
        expect(res.status).toBe(200);
      }
      // Lines are written in batches, at least once a second.
      await eventually(() => pidsThatServed(proc.output()).size === 2, 5_000);

      // A response stored through one process is read through the other (one SQLite file).
      const created = await send(url, 'POST', '/v1/responses', { model: 'mock-model', input: 'hello' });
      expect(created.status).toBe(200);
      const id = (JSON.parse(created.text) as { id: string }).id;
      for (let i = 0; i < 4; i++) {
        const got = await send(url, 'GET', `/v1/responses/${id}`);
        expect(got.status).toBe(200);
        expect(got.text).toBe(created.text);
      }

      // Any process's /metrics counts the requests of both.
      const metrics = await send(url, 'GET', '/metrics');
      expect(counter(metrics.text, 'sluice_requests_total{route="chat_completions"')).toBe(requests);
      expect(metrics.text).toMatch(/^sluice_worker_healthy\{worker="[^"]+"\} 1$/m);

      // A process that dies is replaced, and requests go on being served.
      const served = [...pidsThatServed(proc.output())];
      process.kill(Number(served[0]), 'SIGKILL');
      await eventually(() => proc.output().includes('gateway process died: starting another'), 5_000);
      await eventually(
        () => (proc.output().match(/"msg":"sluice gateway listening"/g) ?? []).length === 3,
        20_000,
      );
      for (let i = 0; i < 6; i++) {
        expect((await send(url, 'POST', '/v1/chat/completions', chatBody())).status).toBe(200);
      }

      const exited = once(proc.child, 'exit');
      proc.child.kill('SIGTERM');
      const [code] = await exited;
      expect(code).toBe(0);
      for (const pid of pidsThatServed(proc.output())) {
        expect(() => process.kill(Number(pid), 0)).toThrow();
      }
    } finally {
      if (proc.child.exitCode === null) proc.child.kill('SIGKILL');
    }
  }, 60_000);
});
