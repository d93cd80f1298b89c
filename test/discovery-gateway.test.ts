import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { FakeApi, NS, pod, TOKEN } from './helpers/fake-kube-api.js';
import { chatBody, eventually, post, startGateway, startMocks } from './helpers/gateway.js';

/** The gateway with discovery.kubernetes: pods of a simulated API server are its workers. */
describe('worker discovery from Kubernetes in the gateway', () => {
  let api: FakeApi;
  let workers: MockWorker[];
  let gateway: Gateway;

  beforeAll(async () => {
    workers = await startMocks(2);
    api = new FakeApi();
    api.pods = [pod('vllm-0', { ip: '127.0.0.1', port: String(workers[0]!.port) })];
    await api.listen();
    const tokenFile = join(mkdtempSync(join(tmpdir(), 'sluice-kube-')), 'token');
    writeFileSync(tokenFile, TOKEN);
    gateway = await startGateway({
      discovery: {
        kubernetes: { apiServer: api.url, namespace: NS, labelSelector: 'app=vllm', tokenFile },
      },
    });
  });
  afterAll(async () => {
    await gateway.close();
    await api.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  it('serves through the discovered pods, and follows them as they come and go', async () => {
    const first = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    expect(first.status).toBe(200);
    expect(first.headers.get('x-sluice-worker')).toBe(`${NS}/vllm-0`);
    const watch = await api.watch(0);
    watch.send('ADDED', pod('vllm-1', { ip: '127.0.0.1', port: String(workers[1]!.port), rv: '101' }));
    watch.send('DELETED', pod('vllm-0', { ip: '127.0.0.1', port: String(workers[0]!.port), rv: '102' }));
    await eventually(async () => {
      const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
      return res.status === 200 && res.headers.get('x-sluice-worker') === `${NS}/vllm-1`;
    });
    const admin = (await (await fetch(`${gateway.url}/admin/workers`)).json()) as {
      data: { id: string; source: string }[];
    };
    expect(admin.data).toEqual([expect.objectContaining({ id: `${NS}/vllm-1`, source: 'discovery' })]);
  });
});
