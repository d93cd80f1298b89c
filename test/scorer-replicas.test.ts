import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { SluiceConfigInput } from '../src/config/schema.js';
import type { Gateway } from '../src/gateway.js';
import { REDIS_URL } from './helpers/backends.js';
import { eventually, perTest, post } from './helpers/gateway.js';
import { ENGINE_MODEL, type MetricsEngine, startMetricsEngine } from './helpers/metrics-engine.js';
import { startTcpProxy } from './helpers/tcp-proxy.js';

/**
 * Gateway replicas behind a round-robin balancer (the client alternates), sharing what they learn
 * through one Redis: the scorer's prefix affinity, and flow control's counts of tenants' requests.
 */
const redis = new Redis(REDIS_URL, { lazyConnect: true });
afterAll(async () => {
  await redis.quit();
});

const engines: MetricsEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) {
    e.holdChats = false;
    await e.close();
  }
});

async function startEngines(count: number, body = VLLM_IDLE): Promise<MetricsEngine[]> {
  const started = await Promise.all(
    Array.from({ length: count }, () => startMetricsEngine({ kind: 'text', body })),
  );
  engines.push(...started);
  return started;
}

const VLLM_IDLE = [
  '# TYPE vllm:num_requests_waiting gauge',
  'vllm:num_requests_waiting{engine="0"} 0.0',
  '# TYPE vllm:num_requests_running gauge',
  'vllm:num_requests_running{engine="0"} 0.0',
  '',
].join('\n');

/** A prompt of its own per session: a long system prompt, then its turns so far. */
function turn(session: number, n: number) {
  const system = `Session ${session} system prompt. `.repeat(60);
  const messages = [{ role: 'system', content: system }];
  for (let i = 1; i <= n; i++) messages.push({ role: 'user', content: `turn ${i} of session ${session}` });
  return { model: ENGINE_MODEL, max_tokens: 1, messages };
}

async function servedBy(gw: Gateway, body: unknown, headers: Record<string, string> = {}): Promise<string> {
  const res = await post(`${gw.url}/v1/chat/completions`, body, headers);
  expect(res.status, res.text).toBe(200);
  return res.headers.get('x-sluice-worker')!;
}

describe('gateway replicas sharing routing through Redis', () => {
  const fx = perTest();
  const config = (prefix: string, urls: string[], extra: SluiceConfigInput = {}): SluiceConfigInput => ({
    workers: urls.map((url, i) => ({ url, id: `e${i}` })),
    redis: { url: REDIS_URL, keyPrefix: prefix },
    signals: { intervalMs: 100 },
    ...extra,
    routing: { policy: 'scorer', ...extra.routing },
  });

  /** Each session's turns alternate between the replicas; how many stayed on the engine of the turn before. */
  async function sessions(replicas: Gateway[], count: number, turns: number): Promise<number> {
    let same = 0;
    let k = 0;
    for (let s = 0; s < count; s++) {
      let previous: string | undefined;
      for (let t = 1; t <= turns; t++) {
        const gw = replicas[k++ % replicas.length]!;
        const worker = await servedBy(gw, turn(s, t));
        if (previous !== undefined && worker === previous) same++;
        previous = worker;
        // What one replica decided reaches the others before the session's next turn.
        await settled(replicas);
      }
    }
    return same;
  }

  /** Every replica has sent what it decided, and applied what the others sent. */
  async function settled(replicas: Gateway[]): Promise<void> {
    const stats = (g: Gateway) => g.sharing.affinity!.stats;
    await eventually(() =>
      replicas.every(
        (g) =>
          stats(g).queued === stats(g).sent &&
          stats(g).applied === replicas.filter((o) => o !== g).reduce((n, o) => n + stats(o).sent, 0),
      ),
    );
  }

  it('keeps every turn of a session on the engine of its previous turn, whichever replica routes it', async () => {
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const urls = (await startEngines(6)).map((e) => e.url);
    const replicas = [await fx.gateway(config(prefix, urls)), await fx.gateway(config(prefix, urls))];
    const sessionsCount = 8;
    const turns = 4;
    expect(await sessions(replicas, sessionsCount, turns)).toBe(sessionsCount * (turns - 1));
    // The sessions did not all land on one engine: affinity, not a single favourite.
    const used = new Set<string>();
    for (let s = 0; s < sessionsCount; s++) used.add(await servedBy(replicas[0]!, turn(s, turns + 1)));
    expect(used.size).toBeGreaterThan(1);

    // A replica that starts now reads what the others learned, and routes the same way.
    const late = await fx.gateway(config(prefix, urls));
    for (let s = 0; s < sessionsCount; s++) {
      const before = await servedBy(replicas[1]!, turn(s, turns + 2));
      await settled([...replicas, late]);
      expect(await servedBy(late, turn(s, turns + 3))).toBe(before);
    }
  });

  it('without sharing, a replica has no affinity for the sessions the other one routed', async () => {
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const urls = (await startEngines(6)).map((e) => e.url);
    // One Redis and one key prefix: only `share: false` keeps the replicas apart.
    const alone = config(prefix, urls, { routing: { scorer: { affinity: { share: false } } } });
    const [a, b] = [await fx.gateway(alone), await fx.gateway(alone)];
    expect(a!.sharing.affinity).toBeUndefined();
    const index = (g: Gateway) => g.context.router.affinity;
    const lastDecision = (g: Gateway) => g.context.metrics.decisions.last()[0]!.decidedBy;
    const first: string[] = [];
    for (let s = 0; s < 8; s++) first.push(await servedBy(a!, turn(s, 1)));
    // A learned its sessions; B learned nothing of them.
    expect(index(a!).size).toBeGreaterThan(0);
    expect(index(b!).size).toBe(0);
    const learnedByA = index(a!).size;
    for (let s = 0; s < 8; s++) {
      await servedBy(b!, turn(s, 2));
      // No prefix known to B: the six idle engines tie, whatever A did with turn 1.
      expect(lastDecision(b!)).toBe('random_tie');
    }
    // ... and what B routed taught A nothing either.
    expect(index(a!).size).toBe(learnedByA);
    // A still has its own affinity: turn 3 goes where turn 1 went.
    for (let s = 0; s < 8; s++) {
      expect(await servedBy(a!, turn(s, 3))).toBe(first[s]);
      expect(lastDecision(a!)).not.toBe('random_tie');
    }
  });

  it('counts a tenant’s requests in flight on every replica: the other replica lets a small tenant go first', async () => {
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    // One runs, one waits: a batch of one; maxWaiting 2 lets one more wait (each request sent
    // makes a replica's engine saturated).
    const [busy, own] = await startEngines(2, VLLM_IDLE.replace(/ 0\.0/g, ' 1.0'));
    busy!.holdChats = true;
    own!.holdChats = true;
    // Each replica's engine under an id of its own: the same id on two replicas is one engine,
    // whose load the replicas share.
    const flowConfig = (url: string, id: string): SluiceConfigInput =>
      config(prefix, [url], {
        workers: [{ url, id }],
        routing: { policy: 'scorer', scorer: { saturation: { maxWaiting: 2 } } },
        // Read once: what each replica sends decides saturation from then on.
        signals: { intervalMs: 60_000 },
        flow: { tenantHeader: 'x-tenant', shareIntervalMs: 50 },
      });
    // Replica A's fleet is another engine of the same model (its requests stay in flight there).
    const a = await fx.gateway(flowConfig(busy!.url, 'busy'));
    const b = await fx.gateway(flowConfig(own!.url, 'own'));
    const send = (gw: Gateway, tenant: string, id: string) =>
      post(`${gw.url}/v1/chat/completions`, turn(0, 1), { 'x-tenant': tenant, 'x-request-id': id });
    const hotOnA = send(a, 'hot', 'hot-a');
    await eventually(() => b.sharing.flow!.inflight(ENGINE_MODEL, 'hot') === 1);
    const blocker = send(b, 'other', 'blocker');
    await eventually(() => own!.stats.requestIds.length === 1);
    const hot = send(b, 'hot', 'hot-b');
    await eventually(() => b.flow!.waiting(ENGINE_MODEL) === 1);
    const small = send(b, 'small', 'small-b');
    await eventually(() => b.flow!.waiting(ENGINE_MODEL) === 2);
    own!.holdChats = false;
    await Promise.all([blocker, hot, small]);
    // Both waited on B, hot first; hot has a request in flight on A: small goes first.
    expect(own!.stats.requestIds).toEqual(['blocker', 'small-b', 'hot-b']);
    busy!.holdChats = false;
    await hotOnA;
  });

  it('shows each replica the requests the others have on each worker: its next request goes to the one left free', async () => {
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const fleet = await startEngines(6);
    for (const e of fleet) e.holdChats = true;
    const urls = fleet.map((e) => e.url);
    // Engines read once, idle: what the replicas send decides from then on.
    const shared = config(prefix, urls, {
      signals: { intervalMs: 60_000 },
      routing: { scorer: { loadShareMs: 20 } },
    });
    const [a, b] = [await fx.gateway(shared), await fx.gateway(shared)];
    // Five sessions of their own through A, held at their engines (A spreads them: its own counts).
    const held = [0, 1, 2, 3, 4].map((s) => post(`${a!.url}/v1/chat/completions`, turn(100 + s, 1)));
    await eventually(() => fleet.reduce((n, e) => n + e.stats.requestIds.length, 0) === 5);
    const busy = fleet.filter((e) => e.stats.requestIds.length === 1).map((e) => urls.indexOf(e.url));
    expect(busy).toHaveLength(5);
    const onB = async () => {
      const res = await fetch(`${b!.url}/admin/workers`);
      const list = (await res.json()) as { data: { id: string; elsewhere: { load: number } }[] };
      return new Map(list.data.map((w) => [w.id, w.elsewhere.load]));
    };
    await eventually(async () => [...(await onB()).values()].reduce((n, l) => n + l, 0) === 5);
    for (const i of busy) expect((await onB()).get(`e${i}`)).toBe(1);
    // B has sent nothing itself: without A's counts the six would look alike to it.
    const free = `e${[0, 1, 2, 3, 4, 5].find((i) => !busy.includes(i))}`;
    const nextOnB = post(`${b!.url}/v1/chat/completions`, turn(200, 1));
    await eventually(() => fleet.reduce((n, e) => n + e.stats.requestIds.length, 0) === 6);
    for (const e of fleet) e.holdChats = false;
    const res = await nextOnB;
    expect(res.headers.get('x-sluice-worker')).toBe(free);
    await Promise.all(held);
    // A's requests ended: B sees none of them any more.
    await eventually(async () => [...(await onB()).values()].every((l) => l === 0));
  });

  it('shares pending prefill, forgets a replica gone quiet, and refuses a malformed message', async () => {
    await redis.connect().catch(() => {});
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const [engine] = await startEngines(1);
    engine!.holdChats = true;
    const shared = config(prefix, [engine!.url], {
      signals: { intervalMs: 60_000 },
      routing: { scorer: { loadShareMs: 20 } },
    });
    const [a, b] = [await fx.gateway(shared), await fx.gateway(shared)];
    const worker = () => b!.context.registry.get('e0')!;
    const prompt = turn(7, 1);
    // A stream with no first token yet: its prompt is pending prefill on A, and so seen by B.
    const stream = post(`${a!.url}/v1/chat/completions`, { ...prompt, stream: true });
    await eventually(() => worker().elsewhere.load === 1);
    expect(worker().elsewhere.pendingPrefill).toBe(a!.context.registry.get('e0')!.pendingPrefill);
    expect(worker().elsewhere.pendingPrefill).toBeGreaterThan(1000);
    // Garbage on the channel is refused; the counts stand.
    await redis.publish(`${prefix}loads`, 'not json');
    await redis.publish(`${prefix}loads`, JSON.stringify({ r: 'forged', w: [['e0', -5, 0]] }));
    await redis.publish(`${prefix}loads`, JSON.stringify({ r: 'forged', w: [['e0', 1e12, 0]] }));
    await eventually(() => b!.sharing.load!.stats.refused === 3);
    expect(worker().elsewhere.load).toBe(1);
    // A stops speaking (its requests still in flight): B forgets its counts within the expiry.
    await a!.sharing.load!.stop();
    await eventually(() => worker().elsewhere.load === 0 && b!.sharing.load!.replicas === 0);
    engine!.holdChats = false;
    await stream;
  });

  it('tells the other replicas at once when a prompt starts on a worker with none pending, not at the next interval', async () => {
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const [engine] = await startEngines(1);
    engine!.holdChats = true;
    // An interval that never comes during the test: only a prompt's start can publish.
    const shared = config(prefix, [engine!.url], {
      signals: { intervalMs: 60_000 },
      routing: { scorer: { loadShareMs: 60_000 } },
    });
    const [a, b] = [await fx.gateway(shared), await fx.gateway(shared)];
    const onB = () => b!.context.registry.get('e0')!.elsewhere;
    const sent = a!.sharing.load!.stats.sent;
    const stream = post(`${a!.url}/v1/chat/completions`, { ...turn(9, 1), stream: true });
    await eventually(() => onB().pendingPrefill > 0);
    expect(onB()).toEqual({ load: 1, pendingPrefill: a!.context.registry.get('e0')!.pendingPrefill });
    expect(a!.sharing.load!.stats.sent).toBe(sent + 1);
    engine!.holdChats = false;
    await stream;
  });

  it('remembers a bounded number of replicas: messages from forged replica ids past it are refused', async () => {
    await redis.connect().catch(() => {});
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const [engine] = await startEngines(1);
    const b = await fx.gateway(
      config(prefix, [engine!.url], {
        signals: { intervalMs: 60_000 },
        routing: { scorer: { loadShareMs: 20 } },
      }),
    );
    const pipeline = redis.pipeline();
    for (let i = 0; i < 300; i++)
      pipeline.publish(`${prefix}loads`, JSON.stringify({ r: `forged-${i}`, w: [['e0', 1, 0]] }));
    await pipeline.exec();
    await eventually(() => b.sharing.load!.stats.applied + b.sharing.load!.stats.refused === 300);
    expect(b.sharing.load!.replicas).toBe(256);
    expect(b.sharing.load!.stats.refused).toBe(44);
    expect(b.context.registry.get('e0')!.elsewhere.load).toBe(256);
  });

  it('hears the other replicas once a Redis that was down at its start comes', async () => {
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const [engine] = await startEngines(1);
    engine!.holdChats = true;
    const url = new URL(REDIS_URL);
    const proxy = await startTcpProxy(Number(url.port || 6379), url.hostname);
    try {
      await proxy.cut();
      const through = config(prefix, [engine!.url], {
        signals: { intervalMs: 60_000 },
        routing: { scorer: { loadShareMs: 20 } },
      });
      // A starts with its Redis unreachable; B has Redis from the start.
      const a = await fx.gateway({
        ...through,
        redis: { url: `redis://127.0.0.1:${proxy.port}`, keyPrefix: prefix },
      });
      const b = await fx.gateway(through);
      await proxy.restore();
      const held = post(`${b.url}/v1/chat/completions`, turn(9, 1));
      await eventually(() => a.context.registry.get('e0')!.elsewhere.load === 1);
      engine!.holdChats = false;
      expect((await held).status).toBe(200);
    } finally {
      engine!.holdChats = false;
      await proxy.close();
    }
  });

  it('keeps nothing in Redis but bounded, expiring keys', async () => {
    await redis.connect().catch(() => {});
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const urls = (await startEngines(2)).map((e) => e.url);
    const streamLength = 5;
    const gw = await fx.gateway(
      config(prefix, urls, {
        routing: { scorer: { affinity: { streamLength } } },
        flow: { tenantHeader: 'x-tenant', shareIntervalMs: 20 },
      }),
    );
    // Many more decisions than the stream keeps, one entry each (sent one after another).
    const sessions = 120;
    for (let s = 0; s < sessions; s++) {
      await servedBy(gw, turn(s, 1), { 'x-tenant': `t${s}` });
      await eventually(() => gw.sharing.affinity!.stats.sent === s + 1);
    }
    const keys = (await redis.keys(`${prefix}*`)).sort();
    // A fixed set of keys, whatever the traffic: the stream, the replicas' set, and this
    // replica's counts (a hash while it has any).
    const own = `${prefix}{flow}:r:${gw.sharing.id}`;
    expect(keys.filter((k) => k !== own)).toEqual([`${prefix}affinity`, `${prefix}{flow}:replicas`].sort());
    for (const key of keys) expect(await redis.pttl(key), key).toBeGreaterThan(0);
    // MAXLEN ~ trims whole nodes of the stream: at most one node past the bound.
    const node = Number(((await redis.config('GET', 'stream-node-max-entries')) as string[])[1]);
    const length = await redis.xlen(`${prefix}affinity`);
    expect(length).toBeGreaterThanOrEqual(streamLength);
    expect(length).toBeLessThanOrEqual(streamLength + node);
    expect(length).toBeLessThan(sessions);
    const stream = await redis.xrange(`${prefix}affinity`, '-', '+');
    // Hashes of blocks, no prompt text.
    expect(JSON.stringify(stream)).not.toContain('system prompt');
  });
});
