import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import type { SluiceConfigInput } from '../src/config/schema.js';
import { FlowControl, type FlowTicket } from '../src/flow/flow-control.js';
import { GatewayMetrics } from '../src/observability/metrics.js';
import { REDIS_URL } from './helpers/backends.js';
import { eventually, perTest, post } from './helpers/gateway.js';
import { ENGINE_MODEL, type MetricsEngine, startMetricsEngine } from './helpers/metrics-engine.js';

/**
 * Issue 49, part 1: whether the fleet is full differs per request (a heavy tenant's hold, a
 * data-parallel rank, the workers a retry excludes). A request held for its own reasons at the
 * head of the queue must not hold the one behind it that could go: on one replica, and on the
 * other replicas, whose lower classes wait for the higher classes waiting elsewhere.
 */

/** A vLLM `/metrics` body with `waiting` requests queued in the engine. */
function vllm(waiting: number): { kind: 'text'; body: string } {
  return {
    kind: 'text',
    body: [
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running{engine="0"} 4.0',
      '# TYPE vllm:num_requests_waiting gauge',
      `vllm:num_requests_waiting{engine="0"} ${waiting}.0`,
      '',
    ].join('\n'),
  };
}

const engines: MetricsEngine[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
});

describe('flow control lets go every waiter that can go (issue 49)', () => {
  it('a waiter held for its own reasons at the head does not hold the one behind it when a worker frees', async () => {
    const control = new FlowControl(
      {
        classes: ['high', 'normal'],
        defaultPriority: 1,
        maxWaitMs: 60_000,
        maxQueued: 100,
        pollMs: 60_000,
        heavyShare: 4,
      },
      new GatewayMetrics(false),
    );
    const signal = new AbortController().signal;
    const fleet = { ordinaryFull: true };
    const ticket = (maxWaitMs: number): FlowTicket => ({ tenant: '', priority: 1, maxWaitMs });
    const events: string[] = [];
    // First in line: a request only one saturated worker can take (a rank): held throughout.
    const held = control.enter('m', ticket(2_000), signal, { key: 'rank 1', saturated: () => true })!;
    held.then(
      () => events.push('held went'),
      () => events.push('held timed out'),
    );
    const free = control.enter('m', ticket(60_000), signal, {
      key: '',
      saturated: () => fleet.ordinaryFull,
    })!;
    free.then(() => events.push('free went'));
    expect(control.waiting('m')).toBe(2);
    // A worker frees: a request of the model ends, and the queue looks again.
    fleet.ordinaryFull = false;
    control.started('m', 'x')();
    await free;
    expect(events).toEqual(['free went']);
    expect(control.waiting('m')).toBe(1);
    control.close(new Error('closed'));
  });

  it('reads a tenant’s weight when the waiter is judged, not when it queued', async () => {
    const control = new FlowControl(
      {
        classes: ['normal'],
        defaultPriority: 0,
        maxWaitMs: 60_000,
        maxQueued: 100,
        pollMs: 60_000,
        heavyShare: 1,
      },
      new GatewayMetrics(false),
    );
    const signal = new AbortController().signal;
    // 'hot' has 3 in flight against 'cold''s 1: heavy now.
    const ends = [1, 2, 3].map(() => control.started('m', 'hot'));
    const cold = control.started('m', 'cold');
    const judged: (string | undefined)[] = [];
    let full = true;
    const waiting = control.enter(
      'm',
      { tenant: 'hot', priority: 0, maxWaitMs: 60_000 },
      signal,
      (weight) => {
        judged.push(weight);
        return full || weight === 'heavy';
      },
    )!;
    expect(judged).toEqual(['heavy']);
    // It drains: one in flight against cold's one, no longer heavy; a worker frees.
    ends[0]!();
    ends[1]!();
    full = false;
    cold();
    await waiting;
    expect(judged.at(-1)).toBeUndefined();
    ends[2]!();
  });
});

describe('flow control in the gateway: no head-of-line block (issue 49)', () => {
  const fx = perTest();
  /** Worker a has two data-parallel ranks, b one: a request for rank 1 can only go to a. */
  const fleet = (a: string, b: string, extra: SluiceConfigInput = {}): SluiceConfigInput => ({
    workers: [
      { url: a, id: 'a', dpSize: 2 },
      { url: b, id: 'b' },
    ],
    routing: { policy: 'scorer', scorer: { saturation: { maxWaiting: 1 } } },
    signals: { intervalMs: 50 },
    ...extra,
  });
  const ask = { model: ENGINE_MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] };

  async function engines2(): Promise<[MetricsEngine, MetricsEngine]> {
    const a = await startMetricsEngine(vllm(5));
    const b = await startMetricsEngine(vllm(5));
    engines.push(a, b);
    return [a, b];
  }

  it('one replica: a request held for its rank stays, the plain one behind it goes as soon as a worker frees', async () => {
    const [a, b] = await engines2();
    const gw = await fx.gateway(fleet(a.url, b.url));
    const order: string[] = [];
    const ranked = post(`${gw.url}/v1/chat/completions`, ask, {
      'x-data-parallel-rank': '1',
      'x-request-id': 'ranked',
      'x-sluice-max-wait-ms': '4000',
    }).then((res) => order.push(`ranked ${res.status}`));
    await eventually(() => gw.flow!.waiting(ENGINE_MODEL) === 1);
    const plain = post(`${gw.url}/v1/chat/completions`, ask, { 'x-request-id': 'plain' }).then((res) => {
      order.push(`plain ${res.status} ${res.headers.get('x-sluice-worker')}`);
    });
    await eventually(() => gw.flow!.waiting(ENGINE_MODEL) === 2);
    b.metrics = vllm(0);
    await plain;
    expect(order).toEqual(['plain 200 b']);
    expect(gw.flow!.waiting(ENGINE_MODEL)).toBe(1);
    a.metrics = vllm(0);
    await ranked;
    expect(order).toEqual(['plain 200 b', 'ranked 200']);
  });

  it('two replicas over Redis: a higher class held for its rank on one does not hold the other’s lower class', async () => {
    const [a, b] = await engines2();
    const redis = { url: REDIS_URL, keyPrefix: `hol-${randomBytes(4).toString('hex')}:` };
    const share = { shareIntervalMs: 20 };
    const one = await fx.gateway(fleet(a.url, b.url, { redis, flow: { ...share, defaultClass: 'high' } }));
    const two = await fx.gateway(fleet(a.url, b.url, { redis, flow: { ...share, defaultClass: 'low' } }));
    const order: string[] = [];
    const ranked = post(`${one.url}/v1/chat/completions`, ask, {
      'x-data-parallel-rank': '1',
      'x-sluice-max-wait-ms': '4000',
    }).then((res) => order.push(`ranked ${res.status}`));
    await eventually(() => one.flow!.waiting(ENGINE_MODEL) === 1);
    const low = post(`${two.url}/v1/chat/completions`, ask).then((res) => {
      order.push(`low ${res.status} ${res.headers.get('x-sluice-worker')}`);
    });
    await eventually(() => two.flow!.waiting(ENGINE_MODEL) === 1);
    // A settle, not a measure: both replicas have shared their queues by now (every 20 ms).
    await new Promise((resolve) => setTimeout(resolve, 100));
    b.metrics = vllm(0);
    await low;
    expect(order).toEqual(['low 200 b']);
    expect(one.flow!.waiting(ENGINE_MODEL)).toBe(1);
    a.metrics = vllm(0);
    await ranked;
    expect(order).toEqual(['low 200 b', 'ranked 200']);
  });
});
