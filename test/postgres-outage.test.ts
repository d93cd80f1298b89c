import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import { ReplicaLease } from '../src/storage/replica-lease.js';
import type { Store } from '../src/storage/types.js';
import { POSTGRES_URL } from './helpers/backends.js';
import { startCli } from './helpers/cli.js';
import { eventually, metric, metricOrZero, perTest, post } from './helpers/gateway.js';
import { chatStream, type ResponseEvent, responseEvents } from './helpers/response-events.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';

/**
 * PostgreSQL unreachable under a running gateway, and at start-up. Mid-run, two outages through
 * a TCP proxy: a loud one (every connection cut, new ones refused) and a silent one (packets
 * dropped: connections hang, nothing is refused). Streams in flight end with a terminal event,
 * background responses never stay in progress, requests that need storage meanwhile get a
 * 503 while the outage lasts, and the gateway serves again once the database is back.
 */
const OUTAGE_MS = 3_000;

const schemas: string[] = [];
const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
afterAll(async () => {
  for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin.end();
});

function newSchema(): string {
  const schema = `t_outage_${randomBytes(5).toString('hex')}`;
  schemas.push(schema);
  return schema;
}

/** POSTGRES_URL with its host and port replaced by the proxy's. */
function throughProxy(proxy: TcpProxy): string {
  const url = new URL(POSTGRES_URL);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  return url.toString();
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface StoredObject {
  status: string;
  error: { code: string } | null;
}

async function stored(gateway: Gateway, id: string): Promise<StoredObject | undefined> {
  const res = await fetch(`${gateway.url}/v1/responses/${id}`);
  return res.status === 200 ? ((await res.json()) as StoredObject) : undefined;
}

describe.each(['cut', 'silence'] as const)('PostgreSQL unreachable mid-run (%s)', (mode) => {
  const fx = perTest();
  let proxy: TcpProxy;
  beforeAll(async () => {
    const target = new URL(POSTGRES_URL);
    proxy = await startTcpProxy(Number(target.port || 5432), target.hostname);
  });
  afterEach(async () => {
    await proxy.restore().catch(() => undefined);
  });
  afterAll(async () => {
    await proxy.close();
  });

  async function setup(storage: { writeRetryMs?: number } = {}) {
    // 30 chunks at 20 a second, then finish_reason stop: each stream runs about 1.5 s.
    const [worker] = await fx.mocks(1, { tokensPerSecond: 20, defaultMaxTokens: 30 });
    const gateway = await fx.gateway({
      workers: [{ url: worker!.url }],
      storage: { kind: 'postgres', url: throughProxy(proxy), schema: newSchema(), ...storage },
    });
    const streamed = post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: 'x',
      stream: true,
    });
    const queued = (await post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: 'x',
      background: true,
    }).then((res) => res.json())) as { id: string; status: string };
    expect(queued.status).toBe('queued');
    await eventually(() => worker!.stats.inflight === 2);
    await sleep(300);
    return { gateway, streamed, backgroundId: queued.id };
  }

  it('a 3 s outage: the stream in flight completes (its write made during the outage), the background response completes, a read meanwhile is a 503 before the outage ends', async () => {
    const { gateway, streamed, backgroundId } = await setup();
    // Every final write of a response, with when it started and ended.
    const store = gateway.context.store!;
    const finishes: { startedAt: number; endedAt?: number }[] = [];
    const finish = store.finishResponse.bind(store);
    store.finishResponse = async (ending) => {
      const call: { startedAt: number; endedAt?: number } = { startedAt: Date.now() };
      finishes.push(call);
      try {
        return await finish(ending);
      } finally {
        call.endedAt = Date.now();
      }
    };
    await proxy[mode]();
    const cutAt = Date.now();

    // Meanwhile: a read that needs storage fails typed, while the outage lasts; health and chat need none.
    const readStarted = Date.now();
    const read = await fetch(`${gateway.url}/v1/responses/${backgroundId}`);
    const readMs = Date.now() - readStarted;
    expect(read.status).toBe(503);
    expect(read.headers.get('retry-after')).toBe('1');
    expect(((await read.json()) as { error: { code: string } }).error.code).toBe('store_unavailable');
    expect(readMs).toBeLessThan(OUTAGE_MS);
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
    expect(await chatStream(gateway.url)).toMatch(/"finish_reason":"stop"[\s\S]*data: \[DONE\]\n\n$/);

    await sleep(OUTAGE_MS - (Date.now() - cutAt));
    const restoredAt = Date.now();
    await proxy.restore();

    const events = responseEvents((await streamed).text);
    const last = events.at(-1)!;
    expect(last.name).toBe('response.completed');
    const id = last.event.response!.id;
    expect((await stored(gateway, id))?.status).toBe('completed');
    await eventually(async () => (await stored(gateway, backgroundId))?.status === 'completed', 10_000);
    expect(await metricOrZero(gateway.url, 'sluice_store_write_failures_total')).toBe(0);
    // The final writes hit the outage: begun while it lasted, done once it was over. A cut
    // refuses each attempt (retried: counted); a silence holds the first one until the path heals.
    const hit = finishes.filter((c) => c.startedAt < restoredAt && c.endedAt! >= restoredAt);
    expect(hit.length).toBeGreaterThanOrEqual(1);
    if (mode === 'cut')
      expect(
        await metric(gateway.url, 'sluice_store_retries_total', {
          backend: 'postgres',
          operation: 'finishResponse',
        }),
      ).toBeGreaterThanOrEqual(1);

    // The pool recovered: a new stored response goes through.
    const after = (await post(`${gateway.url}/v1/responses`, { model: 'mock-model', input: 'y' })).json() as {
      id: string;
      status: string;
    };
    expect(after.status).toBe('completed');
    expect((await stored(gateway, after.id))?.status).toBe('completed');
  }, 30_000);

  it('an outage longer than the write retries: store_write_failed terminals, the background response stored failed once the database is back', async () => {
    const writeRetryMs = 1_000;
    const { gateway, streamed, backgroundId } = await setup({ writeRetryMs });
    await proxy[mode]();

    // A new background response needs its queued row first: a 503 after the write retries, no hang.
    const started = Date.now();
    const refused = await post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: 'z',
      background: true,
    });
    expect(refused.status).toBe(503);
    expect((refused.json() as { error: { code: string } }).error.code).toBe('store_unavailable');
    // Within a few of its retry windows (each attempt is bounded by what is left of the window,
    // at least a second), not the query timeout (15 s) a silent server would otherwise cost.
    expect(Date.now() - started).toBeLessThan(writeRetryMs * 4);

    const last: ResponseEvent = responseEvents((await streamed).text).at(-1)!;
    expect(last.name).toBe('response.failed');
    expect(last.event.response!.error!.code).toBe('store_write_failed');
    await eventually(
      async () =>
        (await metric(gateway.url, 'sluice_store_write_failures_total', {
          backend: 'postgres',
          code: 'store_unavailable',
        })) === 2,
      5_000,
    );
    await proxy.restore();

    // The background response's failure is written once the database answers again.
    let background: StoredObject | undefined;
    await eventually(async () => {
      background = await stored(gateway, backgroundId);
      return background?.status === 'failed';
    }, 10_000);
    expect(background!.error!.code).toBe('store_write_failed');
    // The foreground one was never stored, as its client was told.
    expect(await stored(gateway, last.event.response!.id)).toBeUndefined();
    const after = (await post(`${gateway.url}/v1/responses`, { model: 'mock-model', input: 'y' })).json() as {
      status: string;
    };
    expect(after.status).toBe('completed');
  }, 30_000);
});

describe('PostgreSQL unreachable for longer than the lease, then back', { timeout: 60_000 }, () => {
  const fx = perTest();
  const proxies: TcpProxy[] = [];
  afterEach(async () => {
    for (const proxy of proxies.splice(0)) await proxy.close();
  });

  /** Two replicas, each reaching the database through its own proxy, each running a background response. */
  async function twoReplicas() {
    const target = new URL(POSTGRES_URL);
    const [toA, toB] = await Promise.all(
      [0, 1].map(() => startTcpProxy(Number(target.port || 5432), target.hostname)),
    );
    proxies.push(toA!, toB!);
    // A lease many heartbeats long, swept often; writes that give up quickly, so that the
    // heartbeat tries again soon after the database is back.
    const responses = { heartbeatMs: 200, leaseMs: 2_000, sweepIntervalMs: 100 };
    const schema = newSchema();
    // 200 tokens at 20 a second: each response runs 10 s, through the outage and a lease after it.
    const [worker] = await fx.mocks(1, { tokensPerSecond: 20, defaultMaxTokens: 200 });
    const [a, b] = await Promise.all(
      [toA!, toB!].map((proxy) =>
        fx.gateway({
          workers: [{ url: worker!.url }],
          storage: { kind: 'postgres', url: throughProxy(proxy), schema, writeRetryMs: 300 },
          responses,
        }),
      ),
    );
    const start = async (gateway: Gateway) => {
      const res = await post(`${gateway.url}/v1/responses`, {
        model: 'mock-model',
        input: 'a long story',
        background: true,
      });
      expect(res.status, res.text).toBe(200);
      return (res.json() as { id: string }).id;
    };
    const [onA, onB] = await Promise.all([start(a!), start(b!)]);
    // Both running, with progress stored.
    for (const id of [onA, onB]) {
      let seen = '';
      await eventually(async () => {
        const res = await fetch(`${a!.url}/v1/responses/${id}`);
        seen = `${res.status} ${res.status === 200 ? ((await res.json()) as StoredObject).status : await res.text()}`;
        return seen === '200 in_progress';
      }, 10_000).catch((err: Error) => {
        throw new Error(`${err.message}: GET ${id} answered ${seen}`);
      });
    }

    const ended = async (id: string) => {
      const body = await stored(b!, id);
      return `${body?.status} ${body?.error?.code ?? ''}`.trim();
    };
    // Both ended (by their runs, or by a sweeper).
    const bothEnded = () =>
      eventually(async () => {
        const [x, y] = await Promise.all([stored(b!, onA), stored(b!, onB)]);
        return x?.status !== 'in_progress' && y?.status !== 'in_progress';
      }, 20_000);
    return { worker: worker!, toA: toA!, toB: toB!, responses, onA, onB, ended, bothEnded };
  }

  it("a replica's sweeper ends neither its own running responses nor those of a replica it was cut off with", async () => {
    const { toA, toB, responses, onA, onB, ended, bothEnded } = await twoReplicas();
    // Both replicas lose the database for longer than the lease: both leases lapse in the store.
    await Promise.all([toA.cut(), toB.cut()]);
    await sleep(responses.leaseMs * 1.5);
    // A is back first; B a while later (within a lease of A's return), as after a network blip.
    await toA.restore();
    await sleep(responses.leaseMs * 0.4);
    await toB.restore();

    // Neither ends: A's sweeper (which runs every 100 ms) must take neither its own running
    // response nor B's for an orphan; both run to their end and are stored completed.
    await bothEnded();
    expect({ ownOfA: await ended(onA), ofB: await ended(onB) }).toEqual({
      ownOfA: 'completed',
      ofB: 'completed',
    });
  });

  it('a replica cut off alone for longer than the lease is taken for dead by the one that held its lease: its response ends gateway_restarted, and it stops generating it', async () => {
    const { worker, toA, responses, onA, onB, ended, bothEnded } = await twoReplicas();
    await toA.cut();
    await sleep(responses.leaseMs * 1.5);
    await toA.restore();
    // A reads that its response ended elsewhere and stops its engine request; B's runs on.
    await eventually(() => worker.stats.inflight === 1, 5_000);
    expect(await ended(onB)).toBe('in_progress');
    await bothEnded();
    expect({ ofA: await ended(onA), ofB: await ended(onB) }).toEqual({
      ofA: 'failed gateway_restarted',
      ofB: 'completed',
    });
  });
});

describe("a replica's lease after its own outage (injected clock)", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('judges no other lease until it has held its own without a gap for a whole lease', async () => {
    vi.useFakeTimers();
    let clock = 0;
    // The store as the lease sees it: up, down (refused at once), or hung (answered on release).
    let mode: 'up' | 'down' | 'hung' = 'up';
    let release: (() => void) | undefined;
    const store = {
      renewReplicaLease: () => {
        if (mode === 'down') return Promise.reject(new Error('unreachable'));
        if (mode === 'hung')
          return new Promise<void>((resolve) => {
            release = resolve;
          });
        return Promise.resolve();
      },
    } as unknown as Store;
    const leaseMs = 1_000;
    const lease = new ReplicaLease(
      store,
      { heartbeatMs: 100, leaseMs },
      pino({ level: 'silent' }),
      () => clock,
    );
    const advance = async (ms: number) => {
      for (let i = 0; i < ms / 50; i++) {
        clock += 50;
        await vi.advanceTimersByTimeAsync(50);
      }
    };

    await lease.start();
    // A process just started knows nothing of the others yet: it waits one lease.
    expect(lease.mayJudgeOthers()).toBe(false);
    await advance(leaseMs - 100);
    expect(lease.mayJudgeOthers()).toBe(false);
    await advance(200);
    expect(lease.mayJudgeOthers()).toBe(true);

    // Cut off for longer than the lease: its own lease lapsed, it judges no one.
    mode = 'down';
    await advance(leaseMs * 2);
    expect(lease.mayJudgeOthers()).toBe(false);
    // Back: renewed at once, but the others get a whole lease to renew theirs.
    mode = 'up';
    await advance(200);
    expect(lease.mayJudgeOthers()).toBe(false);
    await advance(leaseMs - 300);
    expect(lease.mayJudgeOthers()).toBe(false);
    await advance(300);
    expect(lease.mayJudgeOthers()).toBe(true);

    // A renewal that hangs past the lease and then succeeds (a silent network that heals) is a
    // gap too: the renewal answered after the previous one surely held.
    mode = 'hung';
    await advance(leaseMs + 200);
    expect(lease.mayJudgeOthers()).toBe(false);
    mode = 'up';
    release!();
    await advance(100);
    expect(lease.mayJudgeOthers()).toBe(false);
    await advance(leaseMs + 200);
    expect(lease.mayJudgeOthers()).toBe(true);
    await lease.stop().catch(() => undefined);
  });
});

describe('PostgreSQL at start-up', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-pg-start-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  async function runServe(args: string[], env: Record<string, string> = {}) {
    const cli = startCli(['serve', '--worker', 'http://127.0.0.1:9', '--port', '0', ...args], env);
    const code = await new Promise<number | null>((resolve) => cli.child.once('exit', resolve));
    cli.url.catch(() => undefined);
    return { code, output: cli.output() };
  }

  /** One line naming the problem; no stack frames. */
  function expectOneClearLine(output: string, ...words: string[]): void {
    const lines = output.trim().split('\n');
    const line = lines.find((l) => l.startsWith('sluice: cannot start:'));
    expect(line, output).toBeDefined();
    for (const word of words) expect(line).toContain(word);
    expect(output).not.toMatch(/^\s+at /m);
    expect(lines.filter((l) => l.startsWith('sluice:'))).toHaveLength(1);
  }

  it('an unreachable server: exit 1 and one line', async () => {
    const port = await closedPort();
    const url = `postgres://root:hunter2@127.0.0.1:${port}/test`;
    const { code, output } = await runServe(['--storage', 'postgres'], { SLUICE_POSTGRES_URL: url });
    expect(code).toBe(1);
    expectOneClearLine(
      output,
      'PostgreSQL',
      `127.0.0.1:${port}`,
      'unavailable',
      'ECONNREFUSED',
      'store_unavailable',
    );
    expect(output).not.toContain('hunter2');
  }, 20_000);

  it('a schema whose tables conflict: exit 1 and one line naming the table', async () => {
    const schema = newSchema();
    await admin.query(`CREATE SCHEMA ${schema}`);
    await admin.query(`CREATE TABLE ${schema}.responses (id INTEGER, something TEXT)`);
    const config = join(dir, 'conflict.yaml');
    writeFileSync(config, `storage: { kind: postgres, url: "${POSTGRES_URL}", schema: ${schema} }\n`);
    const { code, output } = await runServe(['--config', config]);
    expect(code).toBe(1);
    expectOneClearLine(output, 'conflict', 'relation "responses" already exists', 'store_schema_conflict');
  }, 20_000);
});

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}
