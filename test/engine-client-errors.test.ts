import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { chatBody, eventually, metric, post, sseData, startGateway, startMocks } from './helpers/gateway.js';

interface Snapshot {
  id: string;
  healthy: boolean;
  lastError: { code: string; message: string } | null;
}

/** The engine-client errors that come from the gateway's side: ClientClosed, ControlClosed. */
describe('engine client shutdown and lost control channels', () => {
  let workers: MockWorker[];
  let gateway: Gateway;

  beforeAll(async () => {
    workers = await startMocks(2, { tokensPerSecond: 50 });
    gateway = await startGateway({ workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })) });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  it('removing a worker without draining ends its open streams with client_closed', async () => {
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 500 })),
    });
    const worker = response.headers.get('x-sluice-worker')!;
    const index = Number(worker.slice(1));
    const text = response.text();
    await eventually(() => workers[index]!.stats.inflight === 1);
    expect(
      (await fetch(`${gateway.url}/admin/workers/${worker}?drain=false`, { method: 'DELETE' })).status,
    ).toBe(200);
    const events = sseData(await text);
    const last = JSON.parse(events.at(-1)!) as { error: { code: string; type: string } };
    expect(last.error).toMatchObject({ code: 'client_closed', type: 'server_error' });
    expect(await metric(gateway.url, 'sluice_stream_failures_total', { reason: 'gateway_error' })).toBe(1);
    await eventually(() => workers[index]!.stats.aborted === 1 && workers[index]!.stats.inflight === 0);
    // The other worker serves on.
    const next = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    expect(next.status).toBe(200);
    expect(next.headers.get('x-sluice-worker')).not.toBe(worker);
  });

  it('a worker whose health endpoint goes away is marked unhealthy with control_closed', async () => {
    const remaining = (await (await fetch(`${gateway.url}/admin/workers`)).json()) as { data: Snapshot[] };
    const id = remaining.data[0]!.id;
    const mock = workers[Number(id.slice(1))]!;
    mock.setHealthy(false);
    await eventually(async () => {
      const snapshot = (await (await fetch(`${gateway.url}/admin/workers/${id}`)).json()) as Snapshot;
      return !snapshot.healthy && snapshot.lastError?.code === 'control_closed';
    });
    expect((await fetch(`${gateway.url}/health/ready`)).status).toBe(503);
    expect(await metric(gateway.url, 'sluice_worker_healthy', { worker: id })).toBe(0);
    mock.setHealthy(true);
    await eventually(async () => (await fetch(`${gateway.url}/health/ready`)).status === 200);
  });
});
