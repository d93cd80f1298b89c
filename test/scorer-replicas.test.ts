import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { SluiceConfigInput } from '../src/config/schema.js';
import type { Gateway } from '../src/gateway.js';
import { REDIS_URL } from './helpers/backends.js';
import { eventually, perTest, post } from './helpers/gateway.js';
import { ENGINE_MODEL, type MetricsEngine, startMetricsEngine } from './helpers/metrics-engine.js';

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
    const alone = (seed: string): SluiceConfigInput =>
      config(`${prefix}${seed}:`, urls, { routing: { scorer: { affinity: { share: false } } } });
    const replicas = [await fx.gateway(alone('a')), await fx.gateway(alone('b'))];
    expect(replicas[0]!.sharing.affinity).toBeUndefined();
    let same = 0;
    let k = 0;
    for (let s = 0; s < 8; s++) {
      let previous: string | undefined;
      for (let t = 1; t <= 4; t++) {
        const worker = await servedBy(replicas[k++ % 2]!, turn(s, t));
        if (previous !== undefined && worker === previous) same++;
        previous = worker;
      }
    }
    // Turn 3 follows turn 1 on the same replica (so does 4 after 2); turn 2 follows turn 1 on the
    // other, which knows nothing of the session: by chance only.
    expect(same).toBeLessThan(8 * 3);
  });

  it('counts a tenant’s requests in flight on every replica: the other replica lets a small tenant go first', async () => {
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    // One runs, one waits: a batch of one (each request sent makes a replica's engine saturated).
    const [busy, own] = await startEngines(2, VLLM_IDLE.replace(/ 0\.0/g, ' 1.0'));
    busy!.holdChats = true;
    own!.holdChats = true;
    const flowConfig = (url: string): SluiceConfigInput =>
      config(prefix, [url], {
        routing: { policy: 'scorer', scorer: { saturation: { maxWaiting: 1 } } },
        // Read once: what each replica sends decides saturation from then on.
        signals: { intervalMs: 60_000 },
        flow: { tenantHeader: 'x-tenant', shareIntervalMs: 50 },
      });
    // Replica A's fleet is another engine of the same model (its requests stay in flight there).
    const a = await fx.gateway(flowConfig(busy!.url));
    const b = await fx.gateway(flowConfig(own!.url));
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

  it('keeps nothing in Redis but bounded, expiring keys', async () => {
    await redis.connect().catch(() => {});
    const prefix = `sluice-test-${randomBytes(5).toString('hex')}:`;
    const urls = (await startEngines(2)).map((e) => e.url);
    const gw = await fx.gateway(config(prefix, urls));
    await servedBy(gw, turn(1, 1));
    await eventually(() => gw.sharing.affinity!.stats.sent > 0);
    const keys = await redis.keys(`${prefix}*`);
    expect(keys.length).toBeGreaterThan(0);
    for (const key of keys) expect(await redis.pttl(key), key).toBeGreaterThan(0);
    const stream = await redis.xrange(`${prefix}affinity`, '-', '+');
    // Hashes of blocks, no prompt text.
    expect(JSON.stringify(stream)).not.toContain('system prompt');
  });
});
