import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../observability/logger.js';

/**
 * A connection to the Redis the replicas share, for what they tell each other of routing: the
 * scorer's prefix affinity (affinity-sync.ts), the engines' loads (load-share.ts, a publisher
 * and a subscriber) and flow control's counts (flow-share.ts). Like the rate limiter's: it never holds a request up (no
 * offline queue, a command timeout, one retry), ioredis reconnects in the background, and an
 * outage is logged at most every 10 s. `blocking` is for a connection that waits on XREAD.
 */
export function redisLink(url: string, log: Logger, what: string, blocking = false): Redis {
  const options: RedisOptions = {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: 1000,
    ...(blocking ? {} : { commandTimeout: 250 }),
  };
  const redis = new Redis(url, options);
  let lastWarning = Number.NEGATIVE_INFINITY;
  redis.on('error', (err: unknown) => {
    const now = performance.now();
    if (now - lastWarning < 10_000) return;
    lastWarning = now;
    log.warn({ err }, `${what}: Redis is unavailable, each replica goes on with what it knows itself`);
  });
  return redis;
}

/** Connects now; an unreachable Redis is not an error (ioredis keeps trying). */
export async function connectQuietly(redis: Redis): Promise<void> {
  if (redis.status === 'wait') await redis.connect().catch(() => {});
}

/** Closes politely when it can, at once otherwise. */
export async function closeLink(redis: Redis): Promise<void> {
  if (redis.status === 'ready') {
    const quit = await redis.quit().then(
      () => true,
      () => false,
    );
    if (quit) return;
  }
  redis.disconnect();
}
