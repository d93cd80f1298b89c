import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { post, startGateway, startMocks } from './helpers/gateway.js';

interface UtilityBody {
  method: string;
  results: { worker: string; ok: boolean; value?: unknown; error?: { code: string } }[];
  value?: unknown;
  error?: { code: string; values?: Record<string, unknown> };
}

describe('utility calls fanned out to every worker of a model', () => {
  let workers: MockWorker[];
  let gateway: Gateway;
  const admin = (path: string) => `${gateway.url}/admin/models/mock-model/${path}`;

  beforeAll(async () => {
    workers = await startMocks(2);
    gateway = await startGateway({
      workers: workers.map((w) => ({ url: w.url })),
      health: { timeoutMs: 200 },
    });
  });
  afterAll(async () => {
    await gateway.close();
    await Promise.all(workers.map((w) => w.close()));
  });

  /** Each worker's own answer, asked directly (not through the gateway). */
  const sleepingOf = async (w: MockWorker) =>
    ((await (await fetch(`${w.url}/is_sleeping`)).json()) as { is_sleeping: boolean }).is_sleeping;
  const hosts = () => workers.map((w) => new URL(w.url).host).sort();

  it('flush_cache reaches every worker and reports each', async () => {
    const before = workers.map((w) => w.stats.utilityCalls.length);
    const res = await post(admin('flush_cache'), {});
    expect(res.status).toBe(200);
    const body = res.json() as UtilityBody;
    expect(body.results).toHaveLength(2);
    expect(body.results.every((r) => r.ok)).toBe(true);
    expect(body.results.map((r) => r.worker).sort()).toEqual(hosts());
    // Each worker received exactly one flush.
    for (const [i, w] of workers.entries()) {
      expect(w.stats.utilityCalls.slice(before[i])).toEqual(['POST /flush_cache']);
    }
  });

  it('is_sleeping is a consensus call; sleep and wake_up change it', async () => {
    let res = await fetch(admin('is_sleeping'));
    expect(res.status).toBe(200);
    expect(((await res.json()) as UtilityBody).value).toBe(false);
    expect(await Promise.all(workers.map(sleepingOf))).toEqual([false, false]);
    const sleep = await post(admin('sleep'), {});
    expect(sleep.status).toBe(200);
    expect((sleep.json() as UtilityBody).results.map((r) => r.worker).sort()).toEqual(hosts());
    // Every worker is asleep, by its own account.
    expect(await Promise.all(workers.map(sleepingOf))).toEqual([true, true]);
    res = await fetch(admin('is_sleeping'));
    expect(((await res.json()) as UtilityBody).value).toBe(true);
    expect((await post(admin('wake_up'), {})).status).toBe(200);
    expect(await Promise.all(workers.map(sleepingOf))).toEqual([false, false]);
    res = await fetch(admin('is_sleeping'));
    expect(((await res.json()) as UtilityBody).value).toBe(false);
  });

  it('workers that disagree raise InconsistentUtilityResults listing each value', async () => {
    await post(`${workers[0]!.url}/sleep`, {});
    const res = await fetch(admin('is_sleeping'));
    expect(res.status).toBe(409);
    const body = (await res.json()) as UtilityBody;
    expect(body.error?.code).toBe('inconsistent_utility_results');
    expect(Object.values(body.error?.values ?? {}).sort()).toEqual([false, true]);
    await post(`${workers[0]!.url}/wake_up`, {});
  });

  it('a worker that fails, answers garbage, or does not answer gives typed errors', async () => {
    workers[1]!.setUtilityFault('http_500');
    let body = (await (await post(admin('flush_cache'), {})).json()) as UtilityBody;
    expect(body.error?.code).toBe('utility_call_failed');
    expect(body.results.filter((r) => r.ok)).toHaveLength(1);
    // The failure is the failing worker's, and the healthy one was still flushed.
    expect(body.results.find((r) => !r.ok)?.worker).toBe(new URL(workers[1]!.url).host);
    expect(workers[0]!.stats.utilityCalls.at(-1)).toBe('POST /flush_cache');
    expect(workers[1]!.stats.utilityCalls.at(-1)).toBe('POST /flush_cache');

    workers[1]!.setUtilityFault('garbage');
    const garbage = await fetch(admin('is_sleeping'));
    expect(garbage.status).toBe(502);
    body = (await garbage.json()) as UtilityBody;
    expect(body.error?.code).toBe('utility_result_decode');

    workers[1]!.setUtilityFault('hang');
    const hang = await fetch(admin('is_sleeping'));
    expect(hang.status).toBe(504);
    body = (await hang.json()) as UtilityBody;
    expect(body.error?.code).toBe('utility_call_closed');
    workers[1]!.setUtilityFault(undefined);
  });

  it('an unknown model is a 404', async () => {
    const res = await post(`${gateway.url}/admin/models/nope/flush_cache`, {});
    expect(res.status).toBe(404);
  });
});
