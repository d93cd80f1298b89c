import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { SluiceConfigInput } from '../src/config/schema.js';
import type { Gateway } from '../src/gateway.js';
import { REDIS_URL } from './helpers/backends.js';
import { eventually, metricOrZero, perTest, post } from './helpers/gateway.js';
import { ENGINE_MODEL, type MetricsEngine, startMetricsEngine } from './helpers/metrics-engine.js';

/**
 * What replicas share through Redis is bounded by the gateway that reads it, not by whoever
 * wrote it (issue 49, item 10), and peers expire by time, not by a number of intervals (item 5).
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

const VLLM_IDLE = [
  '# TYPE vllm:num_requests_waiting gauge',
  'vllm:num_requests_waiting{engine="0"} 0.0',
  '# TYPE vllm:num_requests_running gauge',
  'vllm:num_requests_running{engine="0"} 0.0',
  '',
].join('\n');

async function startEngine(): Promise<MetricsEngine> {
  const engine = await startMetricsEngine({ kind: 'text', body: VLLM_IDLE });
  engines.push(engine);
  return engine;
}

const chat = (n: number) => ({
  model: ENGINE_MODEL,
  max_tokens: 1,
  messages: [{ role: 'user', content: `question ${n}` }],
});

const newPrefix = () => `sluice-test-${randomBytes(5).toString('hex')}:`;

function config(prefix: string, url: string, extra: SluiceConfigInput = {}): SluiceConfigInput {
  return {
    workers: [{ url, id: 'e0' }],
    signals: { intervalMs: 60_000 },
    ...extra,
    redis: { url: REDIS_URL, keyPrefix: prefix, ...extra.redis },
    routing: { policy: 'scorer', ...extra.routing },
  };
}

/** The admin API's view of the sharing. */
async function replicasView(gw: Gateway): Promise<{
  loads: { failures: Record<string, number> };
  flow: { failures: Record<string, number> };
}> {
  const res = await fetch(`${gw.url}/admin/replicas`);
  expect(res.status).toBe(200);
  return (await res.json()) as Awaited<ReturnType<typeof replicasView>>;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

describe('shared state on Redis, bounded by the gateway that reads it', () => {
  const fx = perTest();

  it('removes a forged flow entry whose expiry is past the gateway’s TTL, or whose hash never expires: its waiting class is not used', async () => {
    await redis.connect().catch(() => {});
    const prefix = newPrefix();
    const engine = await startEngine();
    const gw = await fx.gateway(
      config(prefix, engine.url, { flow: { shareIntervalMs: 20, maxWaitMs: 1_500 } }),
    );
    // The probe: an expiry the writer chose (9e15), a hash without one; and a second
    // entry with a plausible expiry but a hash that never expires.
    const [seconds] = await redis.time();
    await redis.zadd(`${prefix}{flow}:replicas`, 9e15, 'forged', Number(seconds) * 1000 + 2_000, 'forged2');
    await redis.hset(`${prefix}{flow}:r:forged`, `w\n${ENGINE_MODEL}\n0`, '1');
    await redis.hset(`${prefix}{flow}:r:forged2`, `w\n${ENGINE_MODEL}\n0`, '1');
    const exchanges = gw.sharing.flow!.stats.exchanges;
    await eventually(() => gw.sharing.flow!.stats.exchanges >= exchanges + 3);
    const answers = await Promise.all(
      [0, 1, 2, 3, 4, 5].map((n) => post(`${gw.url}/v1/chat/completions`, chat(n))),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(gw.sharing.flow!.highestWaiting(ENGINE_MODEL)).toBeUndefined();
    expect(await redis.zrange(`${prefix}{flow}:replicas`, 0, -1)).toEqual([gw.sharing.id]);
    expect(await redis.exists(`${prefix}{flow}:r:forged2`)).toBe(0);
    expect(gw.sharing.flow!.failures.counts.forged).toBe(2);
    expect((await replicasView(gw)).flow.failures.forged).toBe(2);
    expect(
      await metricOrZero(gw.url, 'sluice_replica_share_failures_total', { channel: 'flow', cause: 'forged' }),
    ).toBe(2);
  });

  it('refuses a peer hash with counts that are not bounded non-negative integers, or too many fields', async () => {
    await redis.connect().catch(() => {});
    const prefix = newPrefix();
    const engine = await startEngine();
    const gw = await fx.gateway(config(prefix, engine.url, { flow: { shareIntervalMs: 20 } }));
    const [seconds] = await redis.time();
    const live = Number(seconds) * 1000 + 4_000;
    // Written at once, as a replica's script does (a hash seen without its expiry is refused).
    const entry = async (name: string, fields: Record<string, string>) => {
      await redis
        .multi()
        .zadd(`${prefix}{flow}:replicas`, live, name)
        .hset(`${prefix}{flow}:r:${name}`, fields)
        .pexpire(`${prefix}{flow}:r:${name}`, 4_000)
        .exec();
    };
    await entry('huge', { [`i\n${ENGINE_MODEL}\nt`]: '1000000000' });
    await entry('negative', { [`i\n${ENGINE_MODEL}\nt`]: '-3' });
    await entry('fraction', { [`i\n${ENGINE_MODEL}\nt`]: '1.5' });
    await entry('class', { [`w\n${ENGINE_MODEL}\n99`]: '1' });
    const many: Record<string, string> = {};
    for (let i = 0; i < 5_000; i++) many[`i\n${ENGINE_MODEL}\nt${i}`] = '1';
    await entry('wide', many);
    // A replica's own: read.
    await entry('fine', { [`i\n${ENGINE_MODEL}\nt`]: '2' });
    await eventually(() => gw.sharing.flow!.inflight(ENGINE_MODEL, 't') === 2);
    expect(gw.sharing.flow!.inflightByTenant(ENGINE_MODEL)?.size).toBe(1);
    expect(gw.sharing.flow!.highestWaiting(ENGINE_MODEL)).toBeUndefined();
    const { failures } = gw.sharing.flow!;
    expect(failures.counts.forged).toBeGreaterThanOrEqual(4);
    expect(failures.counts.oversize).toBeGreaterThanOrEqual(1);
    // Refused entries are skipped each exchange, not read: the wide one is still there, unread.
    expect(await redis.hlen(`${prefix}{flow}:r:wide`)).toBe(5_000);
  });

  it('drops a load message past the byte bound before decoding it, nested garbage before parsing it, and takes a newer peer’s extra fields', async () => {
    await redis.connect().catch(() => {});
    const prefix = newPrefix();
    const engine = await startEngine();
    const gw = await fx.gateway(config(prefix, engine.url, { routing: { scorer: { loadShareMs: 20 } } }));
    const load = gw.sharing.load!;
    const channel = `${prefix}loads`;
    // Valid by the schema, 20 MB: one worker id repeated under many names.
    const w: [string, number, number][] = [];
    for (let i = 0; w.length < 10_000; i++) w.push([`x${i}`.padEnd(2000, 'x'), 1, 0]);
    await redis.publish(channel, JSON.stringify({ r: 'big', w }));
    await redis.publish(channel, '['.repeat(100_000));
    await redis.publish(channel, `{"r":"deep","w":${'['.repeat(100_000)}`);
    // A newer peer: a version, a field this one does not know, a fourth element per worker.
    await redis.publish(
      channel,
      JSON.stringify({ v: 2, r: 'newer', later: { a: 1 }, w: [['e0', 3, 10, 'more']] }),
    );
    await eventually(() => load.stats.applied + load.stats.refused === 4);
    expect(load.failures.counts).toMatchObject({ oversize: 1, malformed: 2 });
    expect(gw.context.registry.get('e0')!.elsewhere).toEqual({ load: 3, pendingPrefill: 10 });
    expect((await replicasView(gw)).loads.failures).toMatchObject({ oversize: 1, malformed: 2 });
    expect(
      await metricOrZero(gw.url, 'sluice_replica_share_failures_total', {
        channel: 'loads',
        cause: 'oversize',
      }),
    ).toBe(1);
  });
});

describe('peers expire by time', () => {
  const fx = perTest();

  it('a 2 s event-loop stall does not drop the other replica’s counts (flow control’s and worker loads)', async () => {
    const prefix = newPrefix();
    const engine = await startEngine();
    engine.holdChats = true;
    const shared = config(prefix, engine.url, {
      routing: { scorer: { loadShareMs: 10 } },
      flow: { tenantHeader: 'x-tenant', shareIntervalMs: 250 },
    });
    const [a, b] = [await fx.gateway(shared), await fx.gateway(shared)];
    const held = post(`${a.url}/v1/chat/completions`, chat(1), { 'x-tenant': 'hot' });
    const onB = () => b.context.registry.get('e0')!.elsewhere.load;
    await eventually(() => b.sharing.flow!.inflight(ENGINE_MODEL, 'hot') === 1 && onB() === 1);
    // Both replicas run in this process: the stall is on both sides at once.
    const end = performance.now() + 2_000;
    while (performance.now() < end) {
      // Busy: no timer, no message, no exchange runs.
    }
    // What B decides with right after the stall, before it heard from anyone.
    expect(b.sharing.flow!.inflight(ENGINE_MODEL, 'hot')).toBe(1);
    b.sharing.load!.tick();
    expect(onB()).toBe(1);
    expect(b.sharing.load!.stats.expired).toBe(0);
    engine.holdChats = false;
    expect((await held).status).toBe(200);
  });

  it('forgets a replica gone quiet after redis.peerTtlMs, and one that stopped at once', async () => {
    await redis.connect().catch(() => {});
    const prefix = newPrefix();
    const engine = await startEngine();
    const b = await fx.gateway(
      config(prefix, engine.url, { redis: { peerTtlMs: 400 }, routing: { scorer: { loadShareMs: 10 } } }),
    );
    const onB = () => b.context.registry.get('e0')!.elsewhere.load;
    await redis.publish(`${prefix}loads`, JSON.stringify({ v: 1, r: 'quiet', w: [['e0', 2, 0]] }));
    await eventually(() => onB() === 2);
    const heard = performance.now();
    await eventually(() => onB() === 0);
    expect(performance.now() - heard).toBeGreaterThanOrEqual(400 - 20);
    expect(b.sharing.load!.stats.expired).toBe(1);
    await redis.publish(`${prefix}loads`, JSON.stringify({ v: 1, r: 'stops', w: [['e0', 3, 0]] }));
    await eventually(() => onB() === 3);
    await redis.publish(`${prefix}loads`, JSON.stringify({ v: 1, r: 'stops', w: [], end: true }));
    await eventually(() => onB() === 0 && b.sharing.load!.replicas === 0);
    expect(b.sharing.load!.stats.expired).toBe(1);
  });
});

/**
 * A process that floods a channel while told `on` (stdin): 100 KB `[[[…` messages, 100 KB of
 * nesting inside an object and small messages with bad counts from ever new replica ids every
 * 20 ms, a 450 KB message valid in shape every 200 ms, and a 20 MB one every 500 ms (the issue's
 * probes): about 50 MB/s.
 */
const FLOODER = `
import { Redis } from 'ioredis';
const [url, channel] = process.argv.slice(-2);
const redis = new Redis(url);
const brackets = '['.repeat(100_000);
const nested = '{"r":"deep","w":' + '['.repeat(100_000);
const w = [];
for (let i = 0; i < 30_000; i++) w.push(['w' + i, 1, 0]);
const big = JSON.stringify({ r: 'big', w });
const hw = [];
for (let i = 0; i < 10_000; i++) hw.push([('h' + i).padEnd(2000, 'h'), 1, 0]);
const huge = JSON.stringify({ r: 'huge', w: hw });
let on = false;
let n = 0;
process.stdin.on('data', (d) => { on = String(d).includes('on'); });
setInterval(() => {
  if (!on) return;
  const p = redis.pipeline();
  p.publish(channel, brackets);
  p.publish(channel, nested);
  if (n % 10 === 0) p.publish(channel, big);
  if (n % 25 === 0) p.publish(channel, huge);
  p.publish(channel, JSON.stringify({ r: 'f' + n++, w: [['e0', 'bad', 0]] }));
  void p.exec();
}, 20);
`;

describe('a flood of forged load messages', () => {
  const fx = perTest();
  let flooder: ChildProcess | undefined;
  afterEach(() => {
    flooder?.kill();
    flooder = undefined;
  });

  it('leaves chat p50 within 1.5 times its value without the flood', async () => {
    const prefix = newPrefix();
    const engine = await startEngine();
    const gw = await fx.gateway(config(prefix, engine.url, { routing: { scorer: { loadShareMs: 10 } } }));
    flooder = spawn(process.execPath, ['--input-type=module', '-e', FLOODER, REDIS_URL, `${prefix}loads`], {
      stdio: ['pipe', 'ignore', 'inherit'],
    });
    const timed = async (count: number): Promise<number[]> => {
      const ms: number[] = [];
      for (let i = 0; i < count; i++) {
        const start = performance.now();
        const res = await post(`${gw.url}/v1/chat/completions`, chat(i));
        expect(res.status).toBe(200);
        ms.push(performance.now() - start);
      }
      return ms;
    };
    await timed(20); // warm up
    const quiet: number[] = [];
    const flooded: number[] = [];
    // Rounds alternated, so that what else runs on the machine weighs on both alike.
    for (let round = 0; round < 3; round++) {
      quiet.push(...(await timed(40)));
      flooder.stdin!.write('on\n');
      const refused = gw.sharing.load!.stats.refused;
      await eventually(() => gw.sharing.load!.stats.refused > refused + 20, 15_000);
      flooded.push(...(await timed(40)));
      flooder.stdin!.write('off\n');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const ratio = median(flooded) / median(quiet);
    console.log(
      `chat p50 ${median(quiet).toFixed(2)} ms without the flood, ${median(flooded).toFixed(2)} ms with it (x${ratio.toFixed(2)}); messages refused: ${JSON.stringify(gw.sharing.load!.failures.counts)}`,
    );
    expect(gw.sharing.load!.failures.counts.oversize).toBeGreaterThan(0);
    expect(gw.sharing.load!.failures.counts.malformed).toBeGreaterThan(0);
    expect(ratio).toBeLessThanOrEqual(1.5);
  });
});
