import type { Redis } from 'ioredis';
import type { FlowControl, FlowPeers } from '../flow/flow-control.js';
import { closeLink, connectQuietly } from './redis-link.js';

/**
 * What flow control shares between replicas (FlowPeers): each replica's requests in flight per
 * model and tenant, and its requests waiting per model and priority class. Fairness then counts
 * a tenant's requests on every replica (two replicas do not each give a hot tenant its full
 * share), and a replica does not let a class go while a higher one waits on another.
 *
 * Not the queues themselves: a request waits on the replica it reached (its connection is there),
 * and each replica decides from counts at most `intervalMs` old. Every `intervalMs`, one Lua
 * script writes this replica's counts (a hash expiring after 4 intervals: a replica that dies
 * drops out), lists the live replicas (a sorted set by expiry, on the Redis server's clock) and
 * reads theirs. Counts older than 4 intervals (Redis unreachable) are not used: each replica then
 * counts its own only.
 */
const SHARE_LUA = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('DEL', KEYS[2])
for i = 4, #ARGV, 2000 do
  redis.call('HSET', KEYS[2], unpack(ARGV, i, math.min(i + 1999, #ARGV)))
end
if #ARGV >= 4 then redis.call('PEXPIRE', KEYS[2], ttl) end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl * 4)
local out = {}
for _, replica in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if replica ~= ARGV[1] then out[#out + 1] = redis.call('HGETALL', ARGV[3] .. replica) end
end
return out
`;

const COMMAND = 'sluiceFlowShare';

interface ShareCommand {
  [COMMAND](
    replicas: string,
    own: string,
    replicaId: string,
    ttlMs: number,
    hashPrefix: string,
    ...fields: string[]
  ): Promise<unknown>;
}

/** Field names: `i\n<model>\n<tenant>` (in flight) and `w\n<model>\n<class index>` (waiting). */
const SEP = '\n';

export class FlowShare implements FlowPeers {
  private readonly redis: Redis & ShareCommand;
  private readonly replicasKey: string;
  private readonly hashPrefix: string;
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;
  private inflightElsewhere = new Map<string, Map<string, number>>();
  private highestElsewhere = new Map<string, number>();
  private updatedAt = Number.NEGATIVE_INFINITY;
  /** Other replicas seen by the last exchange. */
  replicas = 0;

  constructor(
    redis: Redis,
    keyPrefix: string,
    private readonly replicaId: string,
    private readonly flow: FlowControl,
    private readonly intervalMs: number,
  ) {
    // One hash tag: every key of the script in one slot of a Redis cluster.
    this.replicasKey = `${keyPrefix}{flow}:replicas`;
    this.hashPrefix = `${keyPrefix}{flow}:r:`;
    redis.defineCommand(COMMAND, { numberOfKeys: 2, lua: SHARE_LUA });
    this.redis = redis as Redis & ShareCommand;
  }

  async start(): Promise<void> {
    await connectQuietly(this.redis);
    await this.tick();
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.redis
      .multi()
      .del(this.hashPrefix + this.replicaId)
      .zrem(this.replicasKey, this.replicaId)
      .exec()
      .catch(() => {});
    await closeLink(this.redis);
  }

  inflight(model: string, tenant: string): number {
    if (!this.fresh()) return 0;
    return this.inflightElsewhere.get(model)?.get(tenant) ?? 0;
  }

  inflightByTenant(model: string): ReadonlyMap<string, number> | undefined {
    return this.fresh() ? this.inflightElsewhere.get(model) : undefined;
  }

  highestWaiting(model: string): number | undefined {
    return this.fresh() ? this.highestElsewhere.get(model) : undefined;
  }

  /** Publishes this replica's counts and reads the others' (one round trip). */
  async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    try {
      const { inflight, waiting } = this.flow.state();
      const fields: string[] = [];
      for (const [model, byTenant] of inflight)
        for (const [tenant, n] of byTenant) fields.push(`i${SEP}${model}${SEP}${tenant}`, String(n));
      for (const [model, byClass] of waiting)
        for (const [c, n] of byClass) fields.push(`w${SEP}${model}${SEP}${c}`, String(n));
      const reply = await this.redis[COMMAND](
        this.replicasKey,
        this.hashPrefix + this.replicaId,
        this.replicaId,
        this.intervalMs * 4,
        this.hashPrefix,
        ...fields,
      );
      this.read(reply);
      this.updatedAt = performance.now();
    } catch {
      // Unreachable (redisLink logs it): past 4 intervals the others' counts are not used.
    } finally {
      this.ticking = false;
    }
  }

  private fresh(): boolean {
    return performance.now() - this.updatedAt <= this.intervalMs * 4;
  }

  private read(reply: unknown): void {
    const inflight = new Map<string, Map<string, number>>();
    const highest = new Map<string, number>();
    const replicas = Array.isArray(reply) ? reply : [];
    for (const flat of replicas) {
      if (!Array.isArray(flat)) continue;
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const field = String(flat[i]);
        const n = Number(flat[i + 1]);
        if (!Number.isFinite(n) || n <= 0) continue;
        const first = field.indexOf(SEP);
        const last = field.lastIndexOf(SEP);
        if (first !== 1 || last <= first) continue;
        const model = field.slice(first + 1, last);
        const rest = field.slice(last + 1);
        if (field[0] === 'i') {
          let byTenant = inflight.get(model);
          if (!byTenant) {
            byTenant = new Map();
            inflight.set(model, byTenant);
          }
          byTenant.set(rest, (byTenant.get(rest) ?? 0) + n);
        } else if (field[0] === 'w') {
          const c = Number(rest);
          if (Number.isInteger(c) && c < (highest.get(model) ?? Number.POSITIVE_INFINITY))
            highest.set(model, c);
        }
      }
    }
    this.inflightElsewhere = inflight;
    this.highestElsewhere = highest;
    this.replicas = replicas.length;
  }
}
