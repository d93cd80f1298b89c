import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { StoreError } from '../src/errors/storage-errors.js';
import { SqliteStore, SqliteSyncStore, type StoredResponse } from '../src/storage/index.js';
import { eventually, metric, perTest, post } from './helpers/gateway.js';
import { chatStream, responseEvents } from './helpers/response-events.js';

/**
 * SQLite that fails under a running gateway: a write lock held by another process, files that
 * turn unwritable (chattr +i), a full disk (a small tmpfs), a storage thread that dies. The
 * gateway keeps answering /health and chat streams, and /v1/responses ends typed.
 */

const dirs: string[] = [];
const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});
afterAll(() => {
  for (const dir of dirs) {
    execFileSync('chattr', ['-R', '-i', dir], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  }
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-sqlfaults-'));
  dirs.push(dir);
  return dir;
}

/** Another process takes SQLite's write lock (BEGIN IMMEDIATE) and holds it for `ms`. */
/** Holds SQLite's write lock from another process for `ms`; `released()` says whether it let go. */
async function holdWriteLock(path: string, ms: number): Promise<{ released: () => boolean }> {
  const code = `
    const Database = require('better-sqlite3');
    const db = new Database(process.argv[1]);
    db.exec('BEGIN IMMEDIATE');
    console.log('locked');
    setTimeout(() => { db.exec('COMMIT'); db.close(); }, Number(process.argv[2]));`;
  const child = spawn(process.execPath, ['-e', code, path, String(ms)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  let released = false;
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('locked')) resolve();
    });
    child.once('exit', (exitCode) => {
      released = true;
      reject(new Error(`the lock holder exited with ${exitCode}`));
    });
  });
  return { released: () => released };
}

/** Probes GET /health every 50 ms until `until` settles; returns the slowest answer in ms and the count. */
async function healthWhile(
  baseUrl: string,
  until: Promise<unknown>,
): Promise<{ slowestMs: number; probes: number }> {
  let settled = false;
  void until.finally(() => {
    settled = true;
  });
  let slowestMs = 0;
  let probes = 0;
  while (!settled) {
    const started = performance.now();
    const response = await fetch(`${baseUrl}/health`);
    expect(response.status).toBe(200);
    slowestMs = Math.max(slowestMs, performance.now() - started);
    probes += 1;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { slowestMs, probes };
}

const responsesBody = (extra: Record<string, unknown> = {}) => ({
  model: 'mock-model',
  input: 'x',
  ...extra,
});

describe('SQLite: a write lock held by another process', () => {
  const fx = perTest();

  it('a write that outwaits the busy timeout ends store_write_failed; /health answers at once throughout', async () => {
    const [worker] = await fx.mocks(1);
    const path = join(tempDir(), 'sluice.db');
    const gateway = await fx.gateway({
      workers: [{ url: worker!.url }],
      storage: { kind: 'sqlite', path, busyTimeoutMs: 1_000 },
    });
    const lock = await holdWriteLock(path, 4_000);
    const started = Date.now();
    const pending = post(`${gateway.url}/v1/responses`, responsesBody());
    const health = await healthWhile(gateway.url, pending);
    const res = await pending;
    const elapsed = Date.now() - started;
    const lockStillHeld = !lock.released();

    // The client: a typed failure once the busy timeout is over, long before the lock goes.
    const body = res.json() as { id: string; status: string; error: { code: string } };
    expect(res.status).toBe(200);
    expect(body.status).toBe('failed');
    expect(body.error.code).toBe('store_write_failed');
    expect(elapsed).toBeGreaterThanOrEqual(900);
    expect(lockStillHeld).toBe(true);
    // The event loop never waited on the lock (the old synchronous store froze it for the whole
    // busy timeout): no probe took half of that.
    expect(health.probes).toBeGreaterThanOrEqual(5);
    expect(health.slowestMs).toBeLessThan(1_000 / 2);
    expect(
      await metric(gateway.url, 'sluice_store_write_failures_total', {
        backend: 'sqlite',
        code: 'store_unavailable',
      }),
    ).toBe(1);
    // Nothing was stored, as the client was told.
    expect((await fetch(`${gateway.url}/v1/responses/${body.id}`)).status).toBe(404);
  });

  it('a write that outlasts a shorter lock completes and is stored; /health answers at once', async () => {
    const [worker] = await fx.mocks(1);
    const path = join(tempDir(), 'sluice.db');
    const gateway = await fx.gateway({ workers: [{ url: worker!.url }], storage: { kind: 'sqlite', path } });
    await holdWriteLock(path, 1_500);
    const started = Date.now();
    const pending = post(`${gateway.url}/v1/responses`, responsesBody());
    const health = await healthWhile(gateway.url, pending);
    const body = (await pending).json() as { id: string; status: string };
    expect(body.status).toBe('completed');
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_200);
    // No probe waited a third of the lock's 1.5 s (a store on the event loop would freeze it for all of it).
    expect(health.probes).toBeGreaterThanOrEqual(5);
    expect(health.slowestMs).toBeLessThan(1_500 / 3);
    const stored = (await (await fetch(`${gateway.url}/v1/responses/${body.id}`)).json()) as {
      status: string;
    };
    expect(stored.status).toBe('completed');
  });
});

/** A streamed response's SSE events, each with when it arrived (performance.now()). */
async function timedResponseEvents(
  url: string,
  body: unknown,
): Promise<{ type: string; at: number; data: string }[]> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  const events: { type: string; at: number; data: string }[] = [];
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of res.body!) {
    const at = performance.now();
    buffered += decoder.decode(chunk as Uint8Array, { stream: true });
    let end = buffered.indexOf('\n\n');
    while (end >= 0) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (data) events.push({ type: (JSON.parse(data) as { type: string }).type, at, data });
      end = buffered.indexOf('\n\n');
    }
  }
  return events;
}

describe('SQLite: a locked database at the end of a stream', () => {
  const fx = perTest();

  it('the terminal event comes within one busy timeout of the last token (not one per queued write), and says nothing was stored', async () => {
    const busyTimeoutMs = 800;
    const [worker] = await fx.mocks(1, { tokensPerSecond: 20, defaultMaxTokens: 10 });
    const path = join(tempDir(), 'sluice.db');
    const gateway = await fx.gateway({
      workers: [{ url: worker!.url }],
      storage: { kind: 'sqlite', path, busyTimeoutMs },
      // Lease and sweep writes keep joining the storage thread's queue while the lock is held.
      responses: { heartbeatMs: 100, leaseMs: 1_000, sweepIntervalMs: 100 },
    });
    const lock = await holdWriteLock(path, 10 * busyTimeoutMs);
    const events = await timedResponseEvents(`${gateway.url}/v1/responses`, responsesBody({ stream: true }));
    expect(lock.released()).toBe(false);

    const lastDelta = events.filter((e) => e.type === 'response.output_text.delta').at(-1)!;
    const terminal = events.at(-1)!;
    expect(lastDelta).toBeDefined();
    expect(terminal.type).toBe('response.failed');
    const failed = JSON.parse(terminal.data) as { response: { id: string; error: { code: string } } };
    expect(failed.response.error.code).toBe('store_write_failed');
    // One budget for the whole finish: the write waits out the lock once, queue included. (Each
    // write waiting its own busy timeout behind the lease's, then the failure's own write, made it
    // several.)
    expect(terminal.at - lastDelta.at).toBeLessThan(1.5 * busyTimeoutMs);
    // Truthful: nothing was stored, as the client was told.
    expect((await fetch(`${gateway.url}/v1/responses/${failed.response.id}`)).status).toBe(404);
  });
  it('the same for a background response streamed to its client (its progress write in flight does not add a wait)', async () => {
    const busyTimeoutMs = 800;
    const [worker] = await fx.mocks(1, { tokensPerSecond: 20, defaultMaxTokens: 60 });
    const path = join(tempDir(), 'sluice.db');
    const gateway = await fx.gateway({
      workers: [{ url: worker!.url }],
      storage: { kind: 'sqlite', path, busyTimeoutMs },
      responses: { heartbeatMs: 100, leaseMs: 1_000, sweepIntervalMs: 100 },
    });
    const streaming = timedResponseEvents(
      `${gateway.url}/v1/responses`,
      responsesBody({ stream: true, background: true }),
    );
    // Queued and stored; then the lock is taken while it generates.
    await eventually(async () => worker!.stats.inflight === 1, 5_000);
    const lock = await holdWriteLock(path, 10 * busyTimeoutMs);
    const events = await streaming;
    expect(lock.released()).toBe(false);

    const lastDelta = events.filter((e) => e.type === 'response.output_text.delta').at(-1)!;
    const terminal = events.at(-1)!;
    expect(terminal.type).toBe('response.failed');
    const failed = JSON.parse(terminal.data) as { response: { id: string; error: { code: string } } };
    expect(failed.response.error.code).toBe('store_write_failed');
    expect(terminal.at - lastDelta.at).toBeLessThan(1.5 * busyTimeoutMs);
  });
});

describe('SQLite: files that turn unwritable', () => {
  const fx = perTest();
  const mounts: string[] = [];
  afterAll(() => {
    for (const mount of mounts) execFileSync('umount', ['-l', mount]);
  });

  it('chattr +i on the database, its WAL and -shm: response.failed store_write_failed, chat still streams, no SIGBUS (closing included)', async () => {
    const [worker] = await fx.mocks(1);
    const dir = tempDir();
    const path = join(dir, 'sluice.db');
    const gateway = await fx.gateway({ workers: [{ url: worker!.url }], storage: { kind: 'sqlite', path } });
    const before = (await post(`${gateway.url}/v1/responses`, responsesBody())).json() as { id: string };
    const files = [path, `${path}-wal`, `${path}-shm`, dir];
    // Without the check before each call, SQLite's next write to the mapped -shm is a SIGBUS
    // that kills this very process (and the test run with it).
    execFileSync('chattr', ['+i', ...files]);
    try {
      const res = await post(`${gateway.url}/v1/responses`, responsesBody({ stream: true }));
      const last = responseEvents(res.text).at(-1)!;
      expect(last.name).toBe('response.failed');
      expect(last.event.response!.error!.code).toBe('store_write_failed');
      expect(last.event.response!.error!.message).toContain('not writable');
      expect(
        await metric(gateway.url, 'sluice_store_write_failures_total', { code: 'store_read_only' }),
      ).toBe(1);
      // A read is refused typed too (reading writes to -shm as well).
      const read = await fetch(`${gateway.url}/v1/responses/${before.id}`);
      expect(read.status).toBe(500);
      expect(((await read.json()) as { error: { code: string } }).error.code).toBe('store_read_only');
      // The process is alive and serves chat streams.
      expect(await chatStream(gateway.url)).toMatch(/"finish_reason":"stop"[\s\S]*data: \[DONE\]\n\n$/);
      expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
      // Closing checkpoints through -shm too: done behind a read-only keeper process, no SIGBUS.
      await gateway.close();
    } finally {
      execFileSync('chattr', ['-i', ...files]);
    }
    // Writable again: a new gateway on the same file has what was stored before, and stores more.
    const reopened = await fx.gateway({ workers: [{ url: worker!.url }], storage: { kind: 'sqlite', path } });
    expect((await fetch(`${reopened.url}/v1/responses/${before.id}`)).status).toBe(200);
    const after = (await post(`${reopened.url}/v1/responses`, responsesBody())).json() as { status: string };
    expect(after.status).toBe('completed');
  });

  it('a full disk (a 2 MB tmpfs): response.failed store_write_failed, chat still streams, then recovers', async () => {
    const dir = tempDir();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2M', 'tmpfs', dir]);
    mounts.push(dir);
    const [worker] = await fx.mocks(1);
    const path = join(dir, 'db', 'sluice.db');
    mkdirSync(join(dir, 'db'));
    const gateway = await fx.gateway({ workers: [{ url: worker!.url }], storage: { kind: 'sqlite', path } });
    const filler = join(dir, 'filler');
    fillDisk(filler);
    const big = responsesBody({ stream: true, input: 'y'.repeat(200_000) });
    const res = await post(`${gateway.url}/v1/responses`, big);
    const last = responseEvents(res.text).at(-1)!;
    expect(last.name).toBe('response.failed');
    expect(last.event.response!.error!.code).toBe('store_write_failed');
    expect(last.event.response!.error!.message).toContain('full');
    expect(await metric(gateway.url, 'sluice_store_write_failures_total', { code: 'store_full' })).toBe(1);
    expect(await chatStream(gateway.url)).toMatch(/data: \[DONE\]\n\n$/);
    unlinkSync(filler);
    const again = responseEvents((await post(`${gateway.url}/v1/responses`, big)).text).at(-1)!;
    expect(again.name).toBe('response.completed');
    expect((await fetch(`${gateway.url}/v1/responses/${again.event.response!.id}`)).status).toBe(200);
  });
});

/** Writes `path` until the filesystem has no space left. */
function fillDisk(path: string): void {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(16 * 1024, 1);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (err) {
    expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
  } finally {
    closeSync(fd);
  }
}

describe('SQLite: the storage thread dies', () => {
  const record = (id: string): StoredResponse => ({
    id,
    json: '{}',
    status: 'completed',
    model: 'm',
    createdAt: 1,
    previousResponseId: null,
    conversationId: null,
    inputItemsJson: '[]',
    eventsJson: null,
    cancelRequested: false,
    ownerKeyId: null,
  });

  it('pending calls fail typed (store_unavailable), and a new thread serves the same database', async () => {
    const store = new SqliteStore(join(tempDir(), 'sluice.db'));
    await store.migrate();
    await store.insertResponse(record('resp_1'));
    const crash = store.crashThreadForTest();
    const lost = store.getResponse('resp_1').then(
      () => undefined,
      (err: unknown) => err,
    );
    await crash;
    const error = await lost;
    expect(error).toBeInstanceOf(StoreError);
    expect(error).toMatchObject({ code: 'store_unavailable', retryable: true, status: 503 });
    // Restarted and migrated again: the file's data is there.
    expect((await store.getResponse('resp_1'))?.id).toBe('resp_1');
    await store.close();
  });

  it('forwards every method of SqliteSyncStore (a method added there needs no code here); bad arguments fail typed', async () => {
    const store = new SqliteStore(':memory:');
    await store.migrate();
    const names = Object.getOwnPropertyNames(SqliteSyncStore.prototype).filter((n) => n !== 'constructor');
    expect(names.length).toBeGreaterThan(20);
    for (const name of names)
      expect(typeof (store as unknown as Record<string, unknown>)[name]).toBe('function');
    const uncloneable = { ...record('resp_f'), json: (() => '{}') as unknown as string };
    await expect(store.insertResponse(uncloneable)).rejects.toMatchObject({ code: 'store_error' });
    await store.insertResponse(record('resp_ok'));
    expect((await store.getResponse('resp_ok'))?.id).toBe('resp_ok');
    await store.close();
  });

  it('a thread that keeps dying stays down: every call fails typed at once, nothing hangs', async () => {
    const busyTimeoutMs = 2_000;
    const store = new SqliteStore(':memory:', { busyTimeoutMs });
    await store.migrate();
    for (let i = 0; i < 6; i++) {
      await store.crashThreadForTest();
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const started = Date.now();
    await expect(store.getResponse('resp_1')).rejects.toMatchObject({ code: 'store_unavailable' });
    // At once: a call queued for a thread that is not coming back would wait the busy timeout
    // and the queue's grace after it; this one is refused in a small part of the busy timeout.
    expect(Date.now() - started).toBeLessThan(busyTimeoutMs / 10);
    await store.close();
  });
});
