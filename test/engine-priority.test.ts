import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { withPriority } from '../src/dispatch/engine-priority.js';
import type { TracedRequest } from '../src/mock/engine-run.js';
import { REDIS_URL } from './helpers/backends.js';
import { eventually, perTest, post, samples } from './helpers/gateway.js';

/**
 * Flow control's order carried into engines that schedule by priority (vLLM
 * `--scheduling-policy priority`; the mock worker's engine model with `schedulingPolicy:
 * 'priority'` imitates its waiting queue): the gateway sets each request's `priority` from its
 * class and whether its tenant is heavy, so a small tenant's request waiting in an engine goes
 * before a heavy tenant's that came first.
 */
describe('engine priority', () => {
  const fx = perTest();

  it('is set in the body: added to a body without one, written over a client’s, the rest kept', () => {
    expect(withPriority('{"model":"m","n":1}', 7)).toBe('{"model":"m","n":1,"priority":7}');
    expect(withPriority('{}', 0)).toBe('{"priority":0}');
    expect(withPriority('{ }', 2)).toBe('{ "priority":2}');
    const forged = withPriority('{"model":"m","priority":-100,"messages":[]}', 3);
    expect(JSON.parse(forged)).toEqual({ model: 'm', priority: 3, messages: [] });
    // "priority" inside a message's text is not the field: parsed, and the field added.
    const text = withPriority('{"messages":[{"content":"\\"priority\\": 1"}]}', 5);
    expect(JSON.parse(text)).toEqual({ messages: [{ content: '"priority": 1' }], priority: 5 });
  });

  async function fleet(schedulingPolicy: 'fcfs' | 'priority', smallAsks: Record<string, unknown> = {}) {
    const [worker] = await fx.mocks(1, {
      models: ['m'],
      engine: { maxBatch: 1, decodeTokensPerSecond: 20, schedulingPolicy },
    });
    const gateway = await fx.gateway({
      workers: [{ url: worker!.url, id: 'e', schedulingPolicy }],
      // Nothing is held in the gateway: the requests queue in the engine.
      routing: { policy: 'scorer', scorer: { saturation: { maxWaiting: 100 } } },
      // Heavy: more requests in flight than the mean of the other tenants' (a small test's numbers).
      flow: { tenantHeader: 'x-tenant-id', heavyShare: 1 },
      server: { forwardHeaders: ['x-mock-trace-id'] },
    });
    const waiting = async () =>
      samples(await (await fetch(`${worker!.url}/metrics`)).text(), 'vllm:num_requests_waiting')[0]?.value ??
      0;
    const sent: Promise<unknown>[] = [];
    const send = async (id: string, tenant: string, maxTokens: number, waitingAfter: number, extra = {}) => {
      sent.push(
        post(
          `${gateway.url}/v1/chat/completions`,
          { model: 'm', max_tokens: maxTokens, messages: [{ role: 'user', content: id }], ...extra },
          { 'x-tenant-id': tenant, 'x-mock-trace-id': id },
        ).then((res) => expect(res.status, res.text).toBe(200)),
      );
      await eventually(async () => (await waiting()) === waitingAfter);
    };
    await send('small-1', 'small', 6, 0);
    await eventually(async () => (await waiting()) === 0); // small-1 runs: the batch is full
    await send('hot-1', 'hot', 1, 1);
    await send('hot-2', 'hot', 1, 2);
    await send('hot-3', 'hot', 1, 3); // hot has 2 in flight against small's 1: heavy from here
    await send('small-2', 'small', 1, 4, smallAsks);
    await Promise.all(sent);
    const traced = (await (await fetch(`${worker!.url}/mock/engine/requests`)).json()) as TracedRequest[];
    const admitted = [...traced].sort((a, b) => a.admittedAt! - b.admittedAt!);
    return {
      order: admitted.map((t) => t.id),
      priorities: Object.fromEntries(traced.map((t) => [t.id, t.priority])),
    };
  }

  it('an engine that schedules by priority takes a small tenant’s request before a heavy tenant’s that waited longer; a forged priority is written over', async () => {
    // A client's own priority would put it first on its own: the gateway's replaces it.
    const { order, priorities } = await fleet('priority', { priority: -100 });
    expect(order).toEqual(['small-1', 'hot-1', 'hot-2', 'small-2', 'hot-3']);
    // Twice the class (normal: 1), plus one for a heavy tenant's.
    expect(priorities).toEqual({ 'small-1': 2, 'hot-1': 2, 'hot-2': 2, 'hot-3': 3, 'small-2': 2 });
  });

  it('a worker that schedules first come, first served gets the body as it is: no priority (its engine would refuse one), arrival order', async () => {
    const { order, priorities } = await fleet('fcfs');
    expect(order).toEqual(['small-1', 'hot-1', 'hot-2', 'hot-3', 'small-2']);
    // Absent, not 0: the engine's trace tells a body without the field from one with 0.
    expect(priorities).toEqual({
      'small-1': null,
      'hot-1': null,
      'hot-2': null,
      'hot-3': null,
      'small-2': null,
    });
  });

  it('counts the other replicas: a tenant heavy through replica A goes behind in the engine replica B sends to', async () => {
    // Real Redis between two replicas (flow control's shared counts); each replica one engine.
    const [elsewhere, engine] = await fx.mocks(2, {
      models: ['m'],
      engine: { maxBatch: 1, decodeTokensPerSecond: 20, schedulingPolicy: 'priority' },
    });
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const replica = (url: string) =>
      fx.gateway({
        workers: [{ url, id: 'e', schedulingPolicy: 'priority' }],
        routing: { policy: 'scorer', scorer: { saturation: { maxWaiting: 100 } } },
        flow: { tenantHeader: 'x-tenant-id', heavyShare: 1, shareIntervalMs: 50 },
        redis: { url: REDIS_URL, keyPrefix: prefix },
        server: { forwardHeaders: ['x-mock-trace-id'] },
      });
    const a = await replica(elsewhere!.url);
    const b = await replica(engine!.url);
    const ask = (gw: typeof a, id: string, tenant: string, maxTokens: number) =>
      post(
        `${gw.url}/v1/chat/completions`,
        { model: 'm', max_tokens: maxTokens, messages: [{ role: 'user', content: id }] },
        { 'x-tenant-id': tenant, 'x-mock-trace-id': id },
      ).then((res) => expect(res.status, res.text).toBe(200));
    const metric = async (name: string) =>
      samples(await (await fetch(`${engine!.url}/metrics`)).text(), name)[0]?.value ?? 0;
    const waiting = () => metric('vllm:num_requests_waiting');
    // Through A, hot has two requests in flight (one runs, one waits on A's engine).
    const onA = [ask(a, 'hot-a1', 'hot', 8), ask(a, 'hot-a2', 'hot', 8)];
    await eventually(() => b.sharing.flow!.inflight('m', 'hot') === 2);
    // Through B: small runs (B's batch is full), then hot and small each wait.
    const onB = [ask(b, 'small-1', 'small', 4)];
    await eventually(async () => (await metric('vllm:num_requests_running')) === 1);
    onB.push(ask(b, 'hot-b', 'hot', 1));
    await eventually(async () => (await waiting()) === 1);
    onB.push(ask(b, 'small-2', 'small', 1));
    await eventually(async () => (await waiting()) === 2);
    await Promise.all([...onB, ...onA]);
    const traced = (await (await fetch(`${engine!.url}/mock/engine/requests`)).json()) as TracedRequest[];
    const admitted = [...traced].sort((x, y) => x.admittedAt! - y.admittedAt!);
    // On B alone hot has nothing in flight, so it is not heavy: A's two requests, shared through
    // Redis, make it 2 against small's 1.
    expect(Object.fromEntries(traced.map((t) => [t.id, t.priority]))).toEqual({
      'small-1': 2,
      'hot-b': 3,
      'small-2': 2,
    });
    expect(admitted.map((t) => t.id)).toEqual(['small-1', 'small-2', 'hot-b']);
  });
});
