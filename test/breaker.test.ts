import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { Gateway } from '../src/gateway.js';
import { eventually, metric, metricOrZero, perTest, post, sseData } from './helpers/gateway.js';
import { startTcpProxy } from './helpers/tcp-proxy.js';

const stream = (model: string) => ({
  model,
  stream: true,
  max_tokens: 6,
  messages: [{ role: 'user', content: 'hi' }],
});

/** The stream's last event: `[DONE]`, or the code of its error frame. */
function ending(text: string): string {
  const last = sseData(text).at(-1) ?? '';
  if (last === '[DONE]') return last;
  return (JSON.parse(last) as { error: { code: string } }).error.code;
}

/**
 * The circuit breaker never causes a total outage (Envoy's outlier detection): failures of one
 * model's requests eject a worker for that model only, at most `breaker.maxEjectionPercent` of a
 * model's workers are ejected at once, and when all of them are, requests go to them anyway.
 */
describe('circuit breaker: per worker and model, capped, with panic mode', () => {
  const fx = perTest();

  it('mid-stream faults of model A do not eject the worker for model B; A is still served (panic)', async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
        done();
      },
    });
    const [worker] = await fx.mocks(1, { models: ['model-a', 'model-b'] });
    const gateway = new Gateway(
      parseConfig({
        server: { port: 0, forwardHeaders: ['x-mock-*'] },
        storage: { kind: 'none' },
        health: { intervalMs: 60_000 },
        breaker: { failureThreshold: 5, cooldownMs: 60_000 },
        workers: [{ url: worker!.url, id: 'only' }],
      }),
      { logger: pino({ level: 'warn' }, sink), defaultMetrics: false },
    );
    await gateway.start();
    try {
      const url = gateway.url;
      for (let i = 0; i < 6; i++) {
        const res = await post(`${url}/v1/chat/completions`, stream('model-a'), {
          'x-mock-fault': 'reset_after:2',
        });
        expect(res.status).toBe(200);
        expect(ending(res.text)).not.toBe('[DONE]');
      }
      // Model A's circuit on the worker is open; the worker's own circuit is not.
      expect(
        await metric(url, 'sluice_worker_model_circuit_state', { worker: 'only', model: 'model-a' }),
      ).toBe(2);
      const admin = (await (await fetch(`${url}/admin/workers`)).json()) as {
        data: { id: string; workerCircuit: string; modelCircuits: Record<string, string> }[];
      };
      expect(admin.data[0]).toMatchObject({ workerCircuit: 'closed', modelCircuits: { 'model-a': 'open' } });

      // Model B is served as before.
      for (let i = 0; i < 3; i++) {
        const res = await post(`${url}/v1/chat/completions`, stream('model-b'));
        expect(res.status).toBe(200);
        expect(ending(res.text)).toBe('[DONE]');
      }
      // Model A is served too: its only worker is ejected, so it goes there anyway (panic mode).
      const panic = await post(`${url}/v1/chat/completions`, stream('model-a'));
      expect(panic.status).toBe(200);
      expect(ending(panic.text)).toBe('[DONE]');
      // Five failures opened the circuit: the sixth faulty request and this one went in panic mode.
      expect(await metric(url, 'sluice_breaker_panic_total', { model: 'model-a' })).toBe(2);
      expect(await metricOrZero(url, 'sluice_breaker_panic_total', { model: 'model-b' })).toBe(0);
      expect(lines.some((l) => l.model === 'model-a' && String(l.msg).includes('panic mode'))).toBe(true);
      // Its success closed model A's circuit again.
      expect(
        await metricOrZero(url, 'sluice_worker_model_circuit_state', { worker: 'only', model: 'model-a' }),
      ).toBe(0);
      expect(
        await metric(url, 'sluice_circuit_transitions_total', {
          worker: 'only',
          model: 'model-a',
          state: 'open',
        }),
      ).toBe(1);
      expect(await metricOrZero(url, 'sluice_admission_rejections_total')).toBe(0);
    } finally {
      await gateway.close();
    }
  });

  it('two workers of one model: the failing one is ejected, never both', async () => {
    const workers = await fx.mocks(2);
    workers[0]!.setFault('reset_after:2');
    const gateway = await fx.gateway({
      routing: { policy: 'round_robin' },
      health: { intervalMs: 60_000 },
      breaker: { failureThreshold: 2, cooldownMs: 60_000 },
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
    });
    const url = gateway.url;
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      statuses.push((await post(`${url}/v1/chat/completions`, stream('mock-model'))).status);
    }
    expect(
      await metric(url, 'sluice_worker_model_circuit_state', { worker: 'w0', model: 'mock-model' }),
    ).toBe(2);
    const servedBefore = workers[1]!.stats.requests;
    // Now the other one fails as well: it is the last one admitting, so it is not ejected.
    workers[1]!.setFault('reset_after:2');
    for (let i = 0; i < 5; i++) {
      const res = await post(`${url}/v1/chat/completions`, stream('mock-model'));
      statuses.push(res.status);
      expect(ending(res.text)).not.toBe('[DONE]');
    }
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(workers[1]!.stats.requests).toBe(servedBefore + 5);
    expect(
      await metricOrZero(url, 'sluice_worker_model_circuit_state', { worker: 'w1', model: 'mock-model' }),
    ).toBe(0);
    expect(
      await metric(url, 'sluice_breaker_ejections_refused_total', { worker: 'w1', model: 'mock-model' }),
    ).toBe(1);
    expect(await metricOrZero(url, 'sluice_breaker_panic_total')).toBe(0);
    expect(await metricOrZero(url, 'sluice_admission_rejections_total')).toBe(0);
  });

  it('connection-level failures are the worker\u2019s own: its circuit opens for every model, a failed probe reopens it, a good one closes it', async () => {
    // w1 is a mock worker of two models behind a TCP proxy that can reset every connection (a
    // socket that refuses at once); w2 serves both models too, so that retries have somewhere to go.
    const [behind, other] = await fx.mocks(2, { models: ['model-a', 'model-b'] });
    const proxy = await startTcpProxy(Number(new URL(behind!.url).port));
    try {
      const gateway = await fx.gateway({
        routing: { policy: 'round_robin' },
        health: { intervalMs: 60_000 },
        breaker: { failureThreshold: 2, cooldownMs: 1_500 },
        workers: [
          { url: `http://127.0.0.1:${proxy.port}`, id: 'w1' },
          { url: other!.url, id: 'w2' },
        ],
      });
      const url = gateway.url;
      const circuitOfW1 = async () => {
        const admin = (await (await fetch(`${url}/admin/workers`)).json()) as {
          data: { id: string; workerCircuit: string; modelCircuits: Record<string, string> }[];
        };
        return admin.data.find((w) => w.id === 'w1')!;
      };
      const ask = async (model: string) => {
        const res = await post(`${url}/v1/chat/completions`, stream(model));
        expect(res.status).toBe(200);
        expect(ending(res.text)).toBe('[DONE]');
        return res.headers.get('x-sluice-worker');
      };
      const transitions = (state: string) =>
        metricOrZero(url, 'sluice_circuit_transitions_total', { worker: 'w1', model: '', state });

      // Both models are served by both workers.
      const before = new Set<string | null>();
      for (let i = 0; i < 4; i++) before.add(await ask(i % 2 ? 'model-a' : 'model-b'));
      expect(before).toEqual(new Set(['w1', 'w2']));

      // w1's socket resets every connection: model A's requests fail there (and are answered by
      // w2) until w1's own circuit opens.
      await proxy.reset();
      for (let i = 0; i < 10 && (await circuitOfW1()).workerCircuit !== 'open'; i++) await ask('model-a');
      const opened = await circuitOfW1();
      expect(opened.workerCircuit).toBe('open');
      // No request of model B ever failed, yet w1 is out for it too: its circuit is the worker's.
      expect(opened.modelCircuits['model-b'] ?? 'closed').toBe('closed');
      const attemptsWhenOpened = proxy.accepted;
      for (let i = 0; i < 6; i++) expect(await ask('model-b')).toBe('w2');
      expect(proxy.accepted).toBe(attemptsWhenOpened);
      expect(await transitions('open')).toBe(1);

      // After the cooldown one probe goes to w1; it fails (the socket still resets), and the
      // circuit opens again for another cooldown. Its request is answered by w2.
      await eventually(async () => (await circuitOfW1()).workerCircuit === 'half_open', 10_000);
      for (let i = 0; i < 4 && proxy.accepted === attemptsWhenOpened; i++)
        expect(await ask('model-b')).toBe('w2');
      expect(proxy.accepted).toBe(attemptsWhenOpened + 1);
      expect((await circuitOfW1()).workerCircuit).toBe('open');
      expect(await transitions('half_open')).toBe(1);
      expect(await transitions('open')).toBe(2);

      // The socket answers again: the next probe succeeds and closes the circuit; w1 serves both models.
      await proxy.restore();
      await eventually(async () => (await circuitOfW1()).workerCircuit === 'half_open', 10_000);
      const after: (string | null)[] = [];
      for (let i = 0; i < 6; i++) after.push(await ask(i % 2 ? 'model-a' : 'model-b'));
      expect((await circuitOfW1()).workerCircuit).toBe('closed');
      expect(await transitions('closed')).toBe(1);
      expect(after.filter((w) => w === 'w1').length).toBeGreaterThanOrEqual(2);
    } finally {
      await proxy.close();
    }
  });
});
