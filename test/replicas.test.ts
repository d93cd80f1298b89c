import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMockWorker, type MockWorker } from '../src/mock/mock-worker.js';
import { POSTGRES_URL, REDIS_URL } from './helpers/backends.js';
import { eventually, post } from './helpers/gateway.js';

const ADMIN = 'replica-admin-key-0123456789';

/** Two `sluice serve` processes sharing one PostgreSQL (storage, keys) and one Redis (rate limits). */
describe('several gateway replicas behind a load balancer', { timeout: 60_000 }, () => {
  const suffix = randomBytes(5).toString('hex');
  const schema = `replicas_${suffix}`;
  let worker: MockWorker;
  const processes: ChildProcess[] = [];
  let a: string;
  let b: string;

  function startReplica(config: string): Promise<string> {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'src/cli/main.ts', 'serve', '--config', config],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    processes.push(child);
    let output = '';
    return new Promise((resolve, reject) => {
      child.stdout!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const match = /"url":"(http:\/\/[^"]+)","workers"/.exec(output);
        if (match) resolve(match[1]!);
      });
      child.stderr!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
      });
      child.once('exit', (code) => reject(new Error(`replica exited with ${code}: ${output}`)));
    });
  }

  beforeAll(async () => {
    worker = await createMockWorker({ tokensPerSecond: 200 });
    const dir = mkdtempSync(join(tmpdir(), 'sluice-replicas-'));
    const config = join(dir, 'sluice.yaml');
    writeFileSync(
      config,
      [
        'server: { port: 0, forwardHeaders: [x-mock-fault] }',
        'log: { level: info }',
        `storage: { kind: postgres, url: "${POSTGRES_URL}", schema: ${schema} }`,
        `redis: { url: "${REDIS_URL}", keyPrefix: "sluice-test-${suffix}:" }`,
        `auth: { adminKey: ${ADMIN} }`,
        `workers: [{ url: "${worker.url}" }]`,
        'health: { intervalMs: 500 }',
      ].join('\n'),
    );
    [a, b] = await Promise.all([startReplica(config), startReplica(config)]);
  });

  afterAll(async () => {
    for (const child of processes) {
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    }
    await worker.close();
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  });

  const adminPost = (url: string, path: string, body: unknown) =>
    post(`${url}${path}`, body, { authorization: `Bearer ${ADMIN}` });

  it('a response created on one replica is retrieved, byte for byte, on the other', async () => {
    const created = await post(`${a}/v1/responses`, {
      model: 'mock-model',
      input: 'hello',
      max_output_tokens: 5,
    });
    expect(created.status).toBe(200);
    const id = (created.json() as { id: string }).id;
    const fromB = await fetch(`${b}/v1/responses/${id}`);
    expect(await fromB.text()).toBe(created.text);
    // ...and a conversation continues across them.
    const client = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const chained = await client(b).responses.create({
      model: 'mock-model',
      input: 'more',
      previous_response_id: id,
      max_output_tokens: 2,
    });
    expect(chained.previous_response_id).toBe(id);
    expect((await client(a).responses.retrieve(chained.id)).output_text).toBe(chained.output_text);
  });

  it('a background response started on one replica is cancelled from the other', async () => {
    const started = await post(`${a}/v1/responses`, {
      model: 'mock-model',
      input: 'long',
      background: true,
      max_output_tokens: 100_000,
    });
    const id = (started.json() as { id: string }).id;
    await eventually(async () => {
      const now = (await (await fetch(`${b}/v1/responses/${id}`)).json()) as { status: string };
      return now.status === 'in_progress';
    }, 5_000);
    const cancelled = await post(`${b}/v1/responses/${id}/cancel`, {});
    expect((cancelled.json() as { status: string }).status).toBe('cancelled');
    await eventually(() => worker.stats.inflight === 0, 5_000);
  });

  it('a key created on one replica works on both, and its rate limit is shared exactly', async () => {
    const created = await adminPost(a, '/admin/keys', { rpm: 4 });
    expect(created.status).toBe(201);
    const { key, id } = created.json() as { key: string; id: string };
    // The other replica learns that keys exist within its refresh interval.
    await eventually(
      async () =>
        (
          await post(`${b}/v1/chat/completions`, {
            model: 'mock-model',
            messages: [{ role: 'user', content: 'x' }],
          })
        ).status === 401,
      10_000,
    );
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) {
      const url = i % 2 === 0 ? a : b;
      const res = await post(
        `${url}/v1/chat/completions`,
        { model: 'mock-model', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] },
        {
          authorization: `Bearer ${key}`,
        },
      );
      statuses.push(res.status);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(4);
    expect(statuses.filter((s) => s === 429)).toHaveLength(4);
    const usage = (await (
      await fetch(`${b}/admin/keys/${id}/usage`, { headers: { authorization: `Bearer ${ADMIN}` } })
    ).json()) as { requests: number };
    expect(usage.requests).toBe(4);
  });
});
