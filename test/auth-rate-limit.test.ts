import { connect, createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { RateLimitExceeded, RateLimiterUnavailable } from '../src/auth/errors.js';
import { MemoryRateLimiter } from '../src/auth/memory-rate-limiter.js';
import { formatRateLimitHeaders, formatResetDuration } from '../src/auth/rate-limit-headers.js';
import type { Decision, RateLimiter, RateLimits } from '../src/auth/rate-limiter.js';
import { RedisRateLimiter, type RedisRateLimiterOptions } from '../src/auth/redis-rate-limiter.js';
import { REDIS_URL } from './helpers/backends.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';

const RUN_PREFIX = `sluice:rl:test_${process.pid}_${Date.now().toString(36)}:`;
const T0 = 1_760_000_000_000;

const rpm = (value: number): RateLimits => ({ rpm: value, tpm: null });
const tpm = (value: number): RateLimits => ({ rpm: null, tpm: value });
const allowedCount = (decisions: Decision[]) => decisions.filter((d) => d.allowed).length;

describe('MemoryRateLimiter', () => {
  const limiter = new MemoryRateLimiter();
  let counter = 0;
  const uniqueKey = () => `key_memory_${++counter}`;

  it('admits rpm requests, then refuses with the time until one request has refilled', async () => {
    const key = uniqueKey();
    const decisions = [];
    for (let i = 0; i < 4; i++) decisions.push(await limiter.check(key, rpm(3), T0));
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, false]);
    expect(decisions.map((d) => d.remainingRequests)).toEqual([2, 1, 0, 0]);
    expect(decisions[0]).toMatchObject({ limitRequests: 3, resetRequestsSeconds: 20, retryAfterSeconds: 0 });
    expect(decisions[3]?.retryAfterSeconds).toBeCloseTo(20, 6);
    expect(decisions[3]?.resetRequestsSeconds).toBeCloseTo(60, 6);
  });

  it('refills continuously, one request per 60/rpm seconds', async () => {
    const key = uniqueKey();
    for (let i = 0; i < 3; i++) await limiter.check(key, rpm(3), T0);
    const halfway = await limiter.check(key, rpm(3), T0 + 10_000);
    expect(halfway).toMatchObject({ allowed: false, remainingRequests: 0 });
    expect(halfway.retryAfterSeconds).toBeCloseTo(10, 6);
    expect((await limiter.check(key, rpm(3), T0 + 19_990)).allowed).toBe(false);
    expect((await limiter.check(key, rpm(3), T0 + 20_000)).allowed).toBe(true);
    expect((await limiter.check(key, rpm(3), T0 + 20_000)).allowed).toBe(false);
  });

  it('never refills beyond the limit', async () => {
    const key = uniqueKey();
    await limiter.check(key, rpm(2), T0);
    const later = T0 + 3_600_000;
    const decisions = [];
    for (let i = 0; i < 3; i++) decisions.push(await limiter.check(key, rpm(2), later));
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, false]);
  });

  it('a refused check takes nothing', async () => {
    const key = uniqueKey();
    await limiter.check(key, rpm(1), T0);
    for (let i = 0; i < 5; i++) expect((await limiter.check(key, rpm(1), T0 + 1000)).allowed).toBe(false);
    expect((await limiter.check(key, rpm(1), T0 + 60_000)).allowed).toBe(true);
  });

  it('consumeTokens can drive the token bucket negative, refusing until it has refilled', async () => {
    const key = uniqueKey();
    expect((await limiter.check(key, tpm(100), T0)).allowed).toBe(true);
    await limiter.consumeTokens(key, tpm(100), 150, T0);
    const refused = await limiter.check(key, tpm(100), T0);
    expect(refused).toMatchObject({ allowed: false, limitTokens: 100, remainingTokens: 0 });
    // From -50 to 1 token at 100 tokens / 60 s.
    expect(refused.retryAfterSeconds).toBeCloseTo(30.6, 6);
    expect(refused.resetTokensSeconds).toBeCloseTo(90, 6);
    expect((await limiter.check(key, tpm(100), T0 + 30_500)).allowed).toBe(false);
    const admitted = await limiter.check(key, tpm(100), T0 + 30_600);
    expect(admitted).toMatchObject({ allowed: true, remainingTokens: 1 });
  });

  it('reports both dimensions and waits for the slower one', async () => {
    const key = uniqueKey();
    const limits = { rpm: 60, tpm: 600 };
    const first = await limiter.check(key, limits, T0);
    expect(first).toEqual({
      allowed: true,
      retryAfterSeconds: 0,
      limitRequests: 60,
      remainingRequests: 59,
      resetRequestsSeconds: 1,
      limitTokens: 600,
      remainingTokens: 600,
      resetTokensSeconds: 0,
    });
    await limiter.consumeTokens(key, limits, 700, T0);
    const refused = await limiter.check(key, limits, T0);
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterSeconds).toBeCloseTo(10.1, 6);
    expect(refused.remainingRequests).toBe(59);
  });

  it('keeps keys apart', async () => {
    const [a, b] = [uniqueKey(), uniqueKey()];
    await limiter.check(a, rpm(1), T0);
    expect((await limiter.check(a, rpm(1), T0)).allowed).toBe(false);
    expect((await limiter.check(b, rpm(1), T0)).allowed).toBe(true);
  });

  it('admits everything without limits, reporting no numbers', async () => {
    const key = uniqueKey();
    const decisions = await Promise.all(
      Array.from({ length: 50 }, () => limiter.check(key, { rpm: null, tpm: null }, T0)),
    );
    expect(allowedCount(decisions)).toBe(50);
    expect(decisions[0]).toEqual({
      allowed: true,
      retryAfterSeconds: 0,
      limitRequests: null,
      remainingRequests: null,
      resetRequestsSeconds: null,
      limitTokens: null,
      remainingTokens: null,
      resetTokensSeconds: null,
    });
  });

  it('rejects invalid limits and token counts', async () => {
    await expect(limiter.check('k', { rpm: 0, tpm: null })).rejects.toThrow(TypeError);
    await expect(limiter.check('k', { rpm: null, tpm: Number.NaN })).rejects.toThrow(TypeError);
    await expect(limiter.consumeTokens('k', tpm(10), -1)).rejects.toThrow(TypeError);
    await expect(limiter.consumeTokens('k', tpm(10), 1.5)).rejects.toThrow(TypeError);
  });
});

describe('rate limit headers', () => {
  it.each([
    [0, '0s'],
    [0.0201, '21ms'],
    [1, '1s'],
    [8.64, '8.64s'],
    [59.9999, '1m0s'],
    [360, '6m0s'],
    [90.5, '1m30.5s'],
  ])('formats a reset of %s s as %s', (seconds, expected) => {
    expect(formatResetDuration(seconds)).toBe(expected);
  });

  it('are the x-ratelimit-* headers, with retry-after on a refusal', async () => {
    const limiter = new MemoryRateLimiter();
    const limits = { rpm: 2, tpm: 1000 };
    await limiter.check('key_h', limits, T0);
    await limiter.check('key_h', limits, T0);
    const refused = await limiter.check('key_h', limits, T0);
    expect(formatRateLimitHeaders(refused)).toEqual({
      'x-ratelimit-limit-requests': '2',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '1m0s',
      'x-ratelimit-limit-tokens': '1000',
      'x-ratelimit-remaining-tokens': '1000',
      'x-ratelimit-reset-tokens': '0s',
      'retry-after': '30',
    });
    const error = new RateLimitExceeded(refused);
    expect(error).toMatchObject({ status: 429, code: 'rate_limit_exceeded', type: 'rate_limit_error' });
    expect(error.headers()['retry-after']).toBe('30');
  });

  it('leave out what is unlimited or unknown', async () => {
    const decision = await new MemoryRateLimiter().check('key_u', rpm(5), T0);
    expect(Object.keys(formatRateLimitHeaders(decision))).toEqual([
      'x-ratelimit-limit-requests',
      'x-ratelimit-remaining-requests',
      'x-ratelimit-reset-requests',
    ]);
  });
});

/** The suites above need no Redis; only the RedisRateLimiter suite connects (and cleans up). */
const admin = new Redis(REDIS_URL, { lazyConnect: true });

describe('RedisRateLimiter', () => {
  beforeAll(async () => {
    await admin.connect();
  });
  const limiters: RateLimiter[] = [];
  let counter = 0;
  const uniqueKey = () => `key_redis_${++counter}`;
  const open = async (options: RedisRateLimiterOptions = {}) => {
    const limiter = new RedisRateLimiter({ url: REDIS_URL, keyPrefix: RUN_PREFIX, ...options });
    limiters.push(limiter);
    await limiter.connect();
    return limiter;
  };

  afterAll(async () => {
    await Promise.all(limiters.map((limiter) => limiter.close()));
    const keys = await admin.keys(`${RUN_PREFIX}*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  });

  it('admits rpm requests, then refuses with the time until one request has refilled', async () => {
    const limiter = await open();
    const key = uniqueKey();
    const decisions = [];
    for (let i = 0; i < 4; i++) decisions.push(await limiter.check(key, rpm(3)));
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, false]);
    expect(decisions.map((d) => d.remainingRequests)).toEqual([2, 1, 0, 0]);
    expect(decisions[3]?.retryAfterSeconds).toBeGreaterThan(19.5);
    expect(decisions[3]?.retryAfterSeconds).toBeLessThanOrEqual(20);
  });

  it('keeps each bucket as a hash {tokens, ts} with a TTL until it would be full', async () => {
    const limiter = await open();
    const key = uniqueKey();
    await limiter.check(key, { rpm: 60, tpm: 600 });
    await limiter.consumeTokens(key, { rpm: 60, tpm: 600 }, 300);
    const [seconds] = await admin.time();
    const request = await admin.hgetall(`${RUN_PREFIX}${key}:req`);
    expect(Number(request.tokens)).toBeCloseTo(59, 1);
    expect(Math.abs(Number(request.ts) - Number(seconds) * 1000)).toBeLessThan(2000);
    const tokens = await admin.hgetall(`${RUN_PREFIX}${key}:tok`);
    expect(Number(tokens.tokens)).toBeCloseTo(300, 0);
    // Full again in 1 s and 30 s, plus a second of margin.
    expect(await admin.pttl(`${RUN_PREFIX}${key}:req`)).toBeGreaterThan(1500);
    expect(await admin.pttl(`${RUN_PREFIX}${key}:req`)).toBeLessThanOrEqual(2000);
    expect(await admin.pttl(`${RUN_PREFIX}${key}:tok`)).toBeGreaterThan(30_000);
    expect(await admin.pttl(`${RUN_PREFIX}${key}:tok`)).toBeLessThanOrEqual(31_000);
  });

  it('refills over time, admitting again after retryAfterSeconds', async () => {
    const limiter = await open();
    const key = uniqueKey();
    // The Redis server's clock decides (it cannot be injected): one request refills per second,
    // far longer than the burst takes even on a loaded machine.
    const burst = await Promise.all(Array.from({ length: 61 }, () => limiter.check(key, rpm(60))));
    expect(allowedCount(burst)).toBe(60);
    const refused = await limiter.check(key, rpm(60));
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterSeconds).toBeGreaterThan(0);
    expect(refused.retryAfterSeconds).toBeLessThanOrEqual(1);
    await sleep(refused.retryAfterSeconds * 1000 + 50);
    expect((await limiter.check(key, rpm(60))).allowed).toBe(true);
    expect((await limiter.check(key, rpm(60))).allowed).toBe(false);
  });

  it('consumeTokens can drive the token bucket negative, refusing until it has refilled', async () => {
    const limiter = await open();
    const key = uniqueKey();
    expect((await limiter.check(key, tpm(100))).allowed).toBe(true);
    await limiter.consumeTokens(key, tpm(100), 150);
    const refused = await limiter.check(key, tpm(100));
    expect(refused).toMatchObject({ allowed: false, limitTokens: 100, remainingTokens: 0 });
    expect(refused.retryAfterSeconds).toBeGreaterThan(30);
    expect(refused.retryAfterSeconds).toBeLessThanOrEqual(30.6);
  });

  it('decides by the Redis server clock, not the caller one', async () => {
    const limiter: RateLimiter = await open();
    const key = uniqueKey();
    expect((await limiter.check(key, rpm(1), Date.now())).allowed).toBe(true);
    expect((await limiter.check(key, rpm(1), Date.now() + 120_000)).allowed).toBe(false);
  });

  it('two instances (two connections, like two replicas) share one key limit exactly', async () => {
    const [replicaA, replicaB] = await Promise.all([open(), open()]);
    const key = uniqueKey();
    const checks = Array.from({ length: 20 }, (_, i) =>
      (i % 2 === 0 ? replicaA : replicaB).check(key, rpm(10)),
    );
    const decisions = await Promise.all(checks);
    expect(allowedCount(decisions)).toBe(10);
    const remaining = decisions.filter((d) => d.allowed).map((d) => d.remainingRequests);
    expect(remaining.sort((a, b) => (a ?? 0) - (b ?? 0))).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it('tokens consumed on one replica limit the other', async () => {
    const [replicaA, replicaB] = await Promise.all([open(), open()]);
    const key = uniqueKey();
    await replicaA.consumeTokens(key, tpm(1000), 1000);
    expect((await replicaB.check(key, tpm(1000))).allowed).toBe(false);
  });

  it('without limits it admits without calling Redis', async () => {
    const limiter = new RedisRateLimiter({ url: 'redis://127.0.0.1:1', logger: { warn: () => {} } });
    limiters.push(limiter);
    const decision = await limiter.check(uniqueKey(), { rpm: null, tpm: null });
    expect(decision.allowed).toBe(true);
    expect(limiter.stats).toEqual({ failedOpen: 0, failedClosed: 0, lostConsumes: 0 });
  });
});

describe('RedisRateLimiter with Redis down', () => {
  let closedPort: number;
  let silent: Server;
  let silentPort: number;
  const sockets: Socket[] = [];
  const limiters: RedisRateLimiter[] = [];
  const open = (options: RedisRateLimiterOptions) => {
    const limiter = new RedisRateLimiter({ keyPrefix: RUN_PREFIX, ...options });
    limiters.push(limiter);
    return limiter;
  };

  beforeAll(async () => {
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    closedPort = portOf(probe);
    await new Promise((resolve) => probe.close(resolve));
    // Accepts connections and never answers, like Redis behind a dead network path.
    silent = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    silentPort = portOf(silent);
  });
  afterAll(async () => {
    await Promise.all(limiters.map((limiter) => limiter.close()));
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  });

  it('fails open by default: admits, counts, and warns once per interval', async () => {
    const warn = vi.fn();
    const limiter = open({ url: `redis://127.0.0.1:${closedPort}`, logger: { warn } });
    await expect(limiter.connect()).rejects.toThrow();
    const started = Date.now();
    const decisions = await Promise.all(Array.from({ length: 5 }, () => limiter.check('key_down', rpm(1))));
    // Fails fast: within a few of the default 250 ms command timeout, not a hang.
    expect(Date.now() - started).toBeLessThan(250 * 12);
    expect(allowedCount(decisions)).toBe(5);
    expect(decisions[0]).toMatchObject({
      limitRequests: 1,
      remainingRequests: null,
      resetRequestsSeconds: null,
    });
    expect(limiter.stats.failedOpen).toBe(5);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]?.[1]).toMatch(/Redis is unavailable, admitting/);
  });

  it('fails closed when asked, with a 503 RateLimiterUnavailable', async () => {
    const limiter = open({
      url: `redis://127.0.0.1:${closedPort}`,
      failOpen: false,
      logger: { warn: () => {} },
    });
    const started = Date.now();
    const error = await limiter.check('key_down', rpm(1)).catch((err: unknown) => err);
    // Fails fast: within a few of the default 250 ms command timeout, not a hang.
    expect(Date.now() - started).toBeLessThan(250 * 12);
    expect(error).toBeInstanceOf(RateLimiterUnavailable);
    expect(error).toMatchObject({ status: 503, code: 'rate_limiter_unavailable', retryable: true });
    expect(limiter.stats.failedClosed).toBe(1);
  });

  it('consumeTokens never throws for an outage, and counts the lost deduction', async () => {
    const limiter = open({
      url: `redis://127.0.0.1:${closedPort}`,
      failOpen: false,
      logger: { warn: () => {} },
    });
    await limiter.consumeTokens('key_down', tpm(10), 5);
    expect(limiter.stats.lostConsumes).toBe(1);
  });

  it('recovers by itself once Redis is reachable again', async () => {
    const limiter = open({ url: `redis://127.0.0.1:${closedPort}`, logger: { warn: () => {} } });
    await expect(limiter.connect()).rejects.toThrow();
    expect((await limiter.check('key_back', rpm(1))).remainingRequests).toBeNull();
    // Redis "comes back" on the port the limiter keeps retrying: a proxy to the real one.
    const proxy = createServer((client) => {
      const real = new URL(REDIS_URL);
      const upstream = connect(Number(real.port || 6379), real.hostname);
      client.pipe(upstream).pipe(client);
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(closedPort, '127.0.0.1', resolve));
    try {
      let decision = await limiter.check('key_back', rpm(1));
      for (let i = 0; i < 60 && decision.remainingRequests === null; i++) {
        await sleep(100);
        decision = await limiter.check('key_back', rpm(1));
      }
      expect(decision).toMatchObject({ allowed: true, remainingRequests: 0 });
    } finally {
      await limiter.close();
      proxy.close();
    }
  });

  it('a server that never answers fails open after the command timeout', async () => {
    const limiter = open({
      url: `redis://127.0.0.1:${silentPort}`,
      commandTimeoutMs: 200,
      logger: { warn: () => {} },
      // Skips the INFO handshake so the script itself is sent and left unanswered.
      redisOptions: { enableReadyCheck: false },
    });
    await limiter.connect();
    const started = Date.now();
    const decision = await limiter.check('key_silent', rpm(1));
    const elapsed = Date.now() - started;
    expect(decision.allowed).toBe(true);
    expect(elapsed).toBeGreaterThanOrEqual(150);
    // Within a few of its 200 ms command timeout, not a hang.
    expect(elapsed).toBeLessThan(200 * 15);
    expect(limiter.stats.failedOpen).toBe(1);
  });

  it('checks made while connecting to a server that never answers do not wait for the handshake', async () => {
    const limiter = open({
      url: `redis://127.0.0.1:${silentPort}`,
      commandTimeoutMs: 200,
      logger: { warn: () => {} },
    });
    const started = Date.now();
    const connecting = limiter.connect().then(
      () => 'connected',
      () => 'failed',
    );
    const checking = limiter.check('key_silent', rpm(1));
    // Event-driven: the check is decided (failing open after its command timeout) before the
    // handshake has given up, so it did not wait for it.
    const first = await Promise.race([checking.then(() => 'check'), connecting.then(() => 'connect')]);
    expect(first).toBe('check');
    expect((await checking).allowed).toBe(true);
    // The handshake's own commands time out, so connect() gives up too (ioredis reconnects later).
    expect(await connecting).toBe('failed');
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

function portOf(server: Server): number {
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/**
 * Redis lost under a limiter that was using it, through a TCP proxy: a loud outage (connections
 * cut, new ones refused) and a silent one (packets dropped: nothing answers, nothing is refused).
 * Either way checks are decided within a few command timeouts (failing open by default, closed
 * when asked), deductions are counted as lost, and the limiter uses Redis again once it is back.
 */
describe.each(['cut', 'silence'] as const)('RedisRateLimiter when Redis goes away mid-run (%s)', (mode) => {
  const commandTimeoutMs = 250;
  let proxy: TcpProxy;
  const limiters: RedisRateLimiter[] = [];
  const open = (options: Partial<RedisRateLimiterOptions> = {}) => {
    const limiter = new RedisRateLimiter({
      url: `redis://127.0.0.1:${proxy.port}`,
      keyPrefix: RUN_PREFIX,
      commandTimeoutMs,
      logger: { warn: () => {} },
      ...options,
    });
    limiters.push(limiter);
    return limiter;
  };
  beforeAll(async () => {
    const real = new URL(REDIS_URL);
    proxy = await startTcpProxy(Number(real.port || 6379), real.hostname);
  });
  afterAll(async () => {
    await Promise.all(limiters.map((limiter) => limiter.close()));
    await proxy.close();
  });

  it('decides within a few command timeouts, open or closed as configured, and recovers', async () => {
    const failOpen = open();
    const failClosed = open({ failOpen: false });
    await Promise.all([failOpen.connect(), failClosed.connect()]);
    const key = `key_midrun_${mode}`;
    // Redis is in use: the bucket's numbers come from it.
    expect(await failOpen.check(key, rpm(100))).toMatchObject({ allowed: true, remainingRequests: 99 });

    await proxy[mode]();
    const started = performance.now();
    const decisions = await Promise.all(Array.from({ length: 5 }, () => failOpen.check(key, rpm(100))));
    const refused = await failClosed.check(key, rpm(100)).catch((err: unknown) => err);
    const elapsed = performance.now() - started;
    expect(allowedCount(decisions)).toBe(5);
    for (const decision of decisions) expect(decision.remainingRequests).toBeNull();
    expect(failOpen.stats.failedOpen).toBe(5);
    expect(refused).toBeInstanceOf(RateLimiterUnavailable);
    expect(failClosed.stats.failedClosed).toBe(1);
    // Not a hang: both rounds were decided within a few command timeouts each.
    expect(elapsed).toBeLessThan(commandTimeoutMs * 16);
    await failOpen.consumeTokens(key, tpm(1_000), 5);
    expect(failOpen.stats.lostConsumes).toBe(1);

    await proxy.restore();
    let decision = await failOpen.check(key, rpm(100));
    for (let i = 0; i < 100 && decision.remainingRequests === null; i++) {
      await sleep(100);
      decision = await failOpen.check(key, rpm(100));
    }
    expect(decision.allowed).toBe(true);
    expect(decision.remainingRequests).toBeGreaterThanOrEqual(90);
  });
});
