import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import { createMockWorker, type MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, post, startGateway } from './helpers/gateway.js';

interface Snapshot {
  id: string;
  url: string;
  models: string[];
  healthy: boolean;
  source: string;
}

describe('worker registry: admin API, discovery, health', () => {
  let alpha: MockWorker;
  let beta: MockWorker;
  let gateway: Gateway;

  beforeAll(async () => {
    alpha = await createMockWorker({ models: ['alpha'] });
    beta = await createMockWorker({ models: ['beta', 'beta-large'] });
    gateway = await startGateway({ workers: [{ url: alpha.url }], models: { beta: {} } });
  });
  afterAll(async () => {
    await gateway.close();
    await alpha.close();
    await beta.close();
  });

  const admin = (path = '') => `${gateway.url}/admin/workers${path}`;

  it('discovers the models of static workers, and readiness waits for every configured model', async () => {
    const list = (await (await fetch(admin())).json()) as { data: Snapshot[] };
    expect(list.data).toHaveLength(1);
    expect(list.data[0]).toMatchObject({ models: ['alpha'], healthy: true, source: 'static' });
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
    // `beta` is configured but no worker serves it yet.
    const ready = await fetch(`${gateway.url}/health/ready`);
    expect(ready.status).toBe(503);
  });

  it('registers a worker at runtime and discovers its models', async () => {
    const res = await post(admin(), { url: beta.url, id: 'beta-1' });
    expect(res.status).toBe(201);
    expect(res.json()).toMatchObject({ id: 'beta-1', models: ['beta', 'beta-large'], healthy: true });
    expect((await fetch(`${gateway.url}/health/ready`)).status).toBe(200);
    const models = (await (await fetch(`${gateway.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(['alpha', 'beta', 'beta-large']);
    // A request goes only to a worker serving its model.
    const served = await post(
      `${gateway.url}/v1/chat/completions`,
      chatBody({ model: 'beta-large', max_tokens: 1 }),
    );
    expect(served.status).toBe(200);
    expect(served.headers.get('x-sluice-worker')).toBe('beta-1');
    expect((await (await fetch(admin('/beta-1'))).json()) as Snapshot).toMatchObject({ source: 'admin' });
  });

  it('rejects a bad registration and a duplicate id', async () => {
    const bad = await post(admin(), { url: 'not a url' });
    expect(bad.status).toBe(400);
    expect((bad.json() as { error: { param: string } }).error.param).toBe('url');
    const duplicate = await post(admin(), { url: beta.url, id: 'beta-1' });
    expect(duplicate.status).toBe(409);
    expect((await fetch(admin('/nope'))).status).toBe(404);
  });

  it('health checks take an unhealthy worker out of /v1/models and bring it back', async () => {
    beta.setHealthy(false);
    await eventually(async () => {
      const models = (await (await fetch(`${gateway.url}/v1/models`)).json()) as { data: { id: string }[] };
      return models.data.length === 1;
    });
    const refused = await post(
      `${gateway.url}/v1/chat/completions`,
      chatBody({ model: 'beta', max_tokens: 1 }),
    );
    expect(refused.status).toBe(503);
    beta.setHealthy(true);
    await eventually(async () => {
      const res = await post(
        `${gateway.url}/v1/chat/completions`,
        chatBody({ model: 'beta', max_tokens: 1 }),
      );
      return res.status === 200;
    });
  });

  it('removes a worker: its models go away', async () => {
    const res = await fetch(admin('/beta-1'), { method: 'DELETE' });
    expect(res.status).toBe(200);
    const gone = await post(`${gateway.url}/v1/chat/completions`, chatBody({ model: 'beta', max_tokens: 1 }));
    expect(gone.status).toBe(404);
    expect((await fetch(admin('/beta-1'), { method: 'DELETE' })).status).toBe(404);
  });

  it('a worker registered while down becomes usable once it answers', async () => {
    const late = await createMockWorker({ models: ['late'] });
    const url = late.url;
    await late.close();
    const res = await post(admin(), { url, id: 'late-1' });
    expect(res.status).toBe(201);
    expect(res.json()).toMatchObject({ healthy: false, models: [] });
    const port = Number(new URL(url).port);
    const revived = await createMockWorker({ models: ['late'], port });
    try {
      await eventually(async () => {
        const r = await post(
          `${gateway.url}/v1/chat/completions`,
          chatBody({ model: 'late', max_tokens: 1 }),
        );
        return r.status === 200;
      });
    } finally {
      await revived.close();
    }
  });
});
