import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createMockWorker, type MockWorker } from '../src/mock/mock-worker.js';
import { PROGRESS_INTERVAL_MS } from '../src/responses/background-runs.js';
import { POSTGRES_URL } from './helpers/backends.js';
import { startCli } from './helpers/cli.js';
import { eventually, post, sseData } from './helpers/gateway.js';

interface Event {
  type: string;
  sequence_number: number;
  response?: unknown;
}

interface ResponseBody {
  id: string;
  status: string;
  completed_at: number | null;
  error: { code: string; message: string } | null;
  output: { status: string; content?: { text: string }[] }[];
}

/** A short lease, so that a killed gateway counts as dead within seconds. */
const LEASE_ENV = {
  SLUICE_REPLICA_HEARTBEAT_MS: '200',
  SLUICE_REPLICA_LEASE_MS: '1500',
  SLUICE_ORPHAN_SWEEP_MS: '250',
  SLUICE_FOLLOW_POLL_MS: '100',
};
/** Lease + sweep + a process start on a busy machine. */
const RECOVERY_BOUND_MS = 15_000;

const TERMINAL = /^response\.(completed|incomplete|failed)$/;

describe('a gateway killed with background responses running', { timeout: 90_000 }, () => {
  let mock: MockWorker;
  const children: ChildProcess[] = [];
  const dirs: string[] = [];

  beforeAll(async () => {
    mock = await createMockWorker({ tokensPerSecond: 20 });
  });
  afterEach(async () => {
    for (const child of children.splice(0)) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    }
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  afterAll(async () => {
    await mock.close();
  });

  function serve(args: string[]): Promise<string> {
    return serveWithOutput(args).url;
  }

  function serveWithOutput(args: string[]) {
    const proc = startCli(['serve', '--port', '0', '--log-level', 'info', ...args], LEASE_ENV);
    children.push(proc.child);
    return proc;
  }

  async function kill9(child: ChildProcess): Promise<void> {
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }

  const inflight = async () =>
    ((await (await fetch(`${mock.url}/mock/stats`)).json()) as { inflight: number }).inflight;
  const get = async (url: string, id: string) =>
    (await (await fetch(`${url}/v1/responses/${id}`)).json()) as ResponseBody;

  async function startBackground(url: string, onCreated?: (requestId: string) => void): Promise<string> {
    const created = await post(`${url}/v1/responses`, {
      model: 'mock-model',
      input: 'a long story',
      background: true,
      max_output_tokens: 100_000,
    });
    expect(created.status).toBe(200);
    const { id } = created.json() as { id: string };
    onCreated?.(created.headers.get('x-request-id') ?? '');
    // Running, with some output stored by its progress writes.
    await eventually(async () => {
      const now = await get(url, id);
      return now.status === 'in_progress' && (now.output[0]?.content?.[0]?.text.length ?? 0) > 0;
    }, 10_000);
    return id;
  }

  /** What every recovered response must look like, on `url`. */
  async function expectRecovered(url: string, id: string, since: number): Promise<void> {
    await eventually(async () => (await get(url, id)).status === 'failed', RECOVERY_BOUND_MS);
    expect(Date.now() - since).toBeLessThan(RECOVERY_BOUND_MS);
    const text = await (await fetch(`${url}/v1/responses/${id}`)).text();
    const body = JSON.parse(text) as ResponseBody;
    expect(body).toMatchObject({
      status: 'failed',
      completed_at: null,
      error: { code: 'gateway_restarted' },
    });
    expect(body.output.length).toBeGreaterThan(0);
    for (const item of body.output) expect(item.status).toBe('incomplete');
    expect(body.output[0]!.content![0]!.text.length).toBeGreaterThan(0);

    // The stored stream ends, with exactly one terminal event: the failed response.
    const replay = await fetch(`${url}/v1/responses/${id}?stream=true`, {
      signal: AbortSignal.timeout(5_000),
    });
    const events = sseData(await replay.text()).map((d) => JSON.parse(d) as Event);
    expect(events.length).toBeGreaterThan(3);
    expect(events.filter((e) => TERMINAL.test(e.type))).toHaveLength(1);
    expect(events.at(-1)!.type).toBe('response.failed');
    expect(events.at(-1)!.response).toEqual(body);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));

    // Cancel answers at once, with the response as it ended: a cancel that waited on the replica
    // running it would poll the store for its window (10 progress intervals + 2 s = 4.5 s),
    // sleeping half a progress interval between reads. The baseline: a read of the same response
    // through the same gateway, just before; the cancel may take a read more, never a poll's sleep.
    const readStarted = performance.now();
    expect((await fetch(`${url}/v1/responses/${id}`)).status).toBe(200);
    const baseline = performance.now() - readStarted;
    const started = performance.now();
    const cancelled = await post(`${url}/v1/responses/${id}/cancel`, {});
    expect(performance.now() - started - baseline).toBeLessThan(PROGRESS_INTERVAL_MS / 2);
    expect(cancelled.status).toBe(200);
    expect(cancelled.text).toBe(text);
  }

  it('SQLite: the restarted gateway ends it as failed (gateway_restarted)', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sluice-crash-'));
    dirs.push(dataDir);
    const args = ['--worker', mock.url, '--data-dir', dataDir];
    const first = await serve(args);
    const id = await startBackground(first);
    expect(await inflight()).toBe(1);
    await kill9(children[0]!);
    // The engine request does not outlive the gateway.
    await eventually(async () => (await inflight()) === 0, 5_000);

    const second = await serve(args);
    await expectRecovered(second, id, Date.now());
  });

  it('PostgreSQL: a replica ends the responses of a replica that was killed, once its lease lapsed', async () => {
    const schema = `crash_${randomBytes(5).toString('hex')}`;
    const dir = mkdtempSync(join(tmpdir(), 'sluice-crash-pg-'));
    dirs.push(dir);
    const config = join(dir, 'sluice.yaml');
    writeFileSync(
      config,
      [
        `storage: { kind: postgres, url: "${POSTGRES_URL}", schema: ${schema} }`,
        `workers: [{ url: "${mock.url}" }]`,
        'health: { intervalMs: 500 }',
      ].join('\n'),
    );
    try {
      const [a, b] = await Promise.all([serve(['--config', config]), serve(['--config', config])]);
      const id = await startBackground(a);
      expect((await get(b, id)).status).toBe('in_progress');
      // B follows the stream it does not run.
      const following = fetch(`${b}/v1/responses/${id}?stream=true`, {
        signal: AbortSignal.timeout(30_000),
      }).then(async (res) => sseData(await res.text()).map((d) => JSON.parse(d) as Event));
      await new Promise((resolve) => setTimeout(resolve, 300));
      await kill9(children[0]!);
      const killedAt = Date.now();
      await eventually(async () => (await inflight()) === 0, 5_000);
      await expectRecovered(b, id, killedAt);
      // The follower's stream ended too, with the failed response.
      const followed = await following;
      expect(followed.at(-1)!.type).toBe('response.failed');
      expect(followed.filter((e) => TERMINAL.test(e.type))).toHaveLength(1);
      const numbers = followed.map((e) => e.sequence_number);
      for (let i = 1; i < numbers.length; i++) expect(numbers[i]).toBeGreaterThan(numbers[i - 1]!);
      // B still serves.
      const fresh = await post(`${b}/v1/responses`, {
        model: 'mock-model',
        input: 'x',
        max_output_tokens: 2,
      });
      expect((fresh.json() as ResponseBody).status).toBe('incomplete');
    } finally {
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    }
  });

  it('serve --processes 2: the responses of a process that was lost are ended by the others', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sluice-crash-cluster-'));
    dirs.push(dataDir);
    const proc = serveWithOutput(['--worker', mock.url, '--data-dir', dataDir, '--processes', '2']);
    const url = await proc.url;
    // Every process listens (a port whose only process dies would close).
    await eventually(() => proc.output().includes('"msg":"sluice cluster listening"'), 20_000);
    let requestId = '';
    const id = await startBackground(url, (rid) => {
      requestId = rid;
    });
    // The process that took the request says so in its log line (logs are flushed every second).
    let pid = 0;
    await eventually(() => {
      const line = proc
        .output()
        .split('\n')
        .find((l) => l.includes(`"requestId":"${requestId}"`) && l.includes('"pid":'));
      pid = Number(/"pid":(\d+)/.exec(line ?? '')?.[1] ?? 0);
      return pid > 0;
    }, 5_000);
    expect(pid).not.toBe(proc.child.pid);
    process.kill(pid, 'SIGKILL');
    const lostAt = Date.now();
    await eventually(async () => (await inflight()) === 0, 5_000);
    await expectRecovered(url, id, lostAt);
  });
});
