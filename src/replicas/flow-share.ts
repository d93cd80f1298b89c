import type { Redis } from 'ioredis';
import type { FlowControl, FlowPeers } from '../flow/flow-control.js';
import { closeLink, connectQuietly } from './redis-link.js';
import { type ShareFailureSink, ShareFailures } from './share-failures.js';

/**
 * What flow control shares between replicas (FlowPeers): each replica's requests in flight per
 * model and tenant, and its requests waiting per model and priority class. Fairness then counts
 * a tenant's requests on every replica (two replicas do not each give a hot tenant its full
 * share), and a replica does not let a class go while a higher one waits on another.
 *
 * Not the queues themselves: a request waits on the replica it reached (its connection is there),
 * and each replica decides from counts at most `intervalMs` old. Every `intervalMs`, one Lua
 * script writes this replica's counts (a hash expiring after `redis.peerTtlMs`: a replica that
 * dies drops out), lists the live replicas (a sorted set by expiry, on the Redis server's clock)
 * and reads theirs. Counts not refreshed within `peerTtlMs` on this replica's monotonic clock
 * (Redis unreachable) are not used: each replica then counts its own only.
 *
 * Whoever can write to the shared Redis could write an entry; the bounds are this gateway's, not
 * the writer's: an entry whose expiry is further ahead than `peerTtlMs` (the Redis server's
 * clock), or whose hash has no expiry or a longer one, is removed; a hash with too many fields or
 * bytes is skipped, at most `MAX_REPLICAS` are read, and counts that are not integers in
 * [1, `MAX_COUNT`] (or names past `MAX_NAME`) make the whole entry refused. Each is counted
 * (`forged`, `oversize`).
 */
const SHARE_LUA = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
local maxReplicas = tonumber(ARGV[4])
local maxFields = tonumber(ARGV[5])
local maxBytes = tonumber(ARGV[6])
local maxTotal = tonumber(ARGV[7])
redis.call('DEL', KEYS[2])
for i = 8, #ARGV, 2000 do
  redis.call('HSET', KEYS[2], unpack(ARGV, i, math.min(i + 1999, #ARGV)))
end
if #ARGV >= 8 then redis.call('PEXPIRE', KEYS[2], ttl) end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local forged = redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. (now + ttl), '+inf')
redis.call('PEXPIRE', KEYS[1], ttl * 4)
local oversize = 0
local total = 0
local out = {}
for _, replica in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now, now + ttl, 'LIMIT', 0, maxReplicas + 1)) do
  if replica ~= ARGV[1] and #out < maxReplicas then
    local key = ARGV[3] .. replica
    local pttl = redis.call('PTTL', key)
    if pttl == -1 or pttl > ttl then
      forged = forged + 1
      redis.call('ZREM', KEYS[1], replica)
      if pttl == -1 then redis.call('DEL', key) end
    elseif pttl > 0 then
      if redis.call('HLEN', key) > maxFields then
        oversize = oversize + 1
      else
        local flat = redis.call('HGETALL', key)
        local bytes = 0
        for i = 1, #flat do bytes = bytes + #flat[i] end
        if bytes > maxBytes or total + bytes > maxTotal then
          oversize = oversize + 1
        else
          total = total + bytes
          out[#out + 1] = flat
        end
      end
    end
  end
end
return { forged, oversize, out }
`;

const COMMAND = 'sluiceFlowShare';

/** Other replicas read per exchange at most. */
export const MAX_REPLICAS = 64;
/** Fields (counts) of one replica's hash at most: past it the replica is skipped (its writer cuts to it). */
export const MAX_FIELDS = 4096;
/** Bytes of one replica's hash at most, and of all read in one exchange. */
const MAX_BYTES = 256 * 1024;
const MAX_TOTAL_BYTES = 2 * 1024 * 1024;
/** A count past this is no replica's. */
export const MAX_COUNT = 1_000_000;
/** A model or tenant name past this many characters is no replica's. */
const MAX_NAME = 1024;

interface ShareCommand {
  [COMMAND](
    replicas: string,
    own: string,
    replicaId: string,
    ttlMs: number,
    hashPrefix: string,
    maxReplicas: number,
    maxFields: number,
    maxBytes: number,
    maxTotal: number,
    ...fields: string[]
  ): Promise<unknown>;
}

/** Field names: `i\n<model>\n<tenant>` (in flight) and `w\n<model>\n<class index>` (waiting). */
const SEP = '\n';

export interface FlowShareOptions {
  readonly intervalMs: number;
  /** How long the others' counts count after the last exchange, and how long this replica's live in Redis. */
  readonly peerTtlMs: number;
  /** Priority classes: a waiting class index past them is no replica's. */
  readonly classCount: number;
}

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
  /** Exchanges done; what failed, by cause. */
  readonly stats = { exchanges: 0 };
  readonly failures: ShareFailures;

  constructor(
    redis: Redis,
    keyPrefix: string,
    private readonly replicaId: string,
    private readonly flow: FlowControl,
    private readonly options: FlowShareOptions,
    onFailure?: ShareFailureSink,
  ) {
    // One hash tag: every key of the script in one slot of a Redis cluster.
    this.replicasKey = `${keyPrefix}{flow}:replicas`;
    this.hashPrefix = `${keyPrefix}{flow}:r:`;
    redis.defineCommand(COMMAND, { numberOfKeys: 2, lua: SHARE_LUA });
    this.redis = redis as Redis & ShareCommand;
    this.failures = new ShareFailures('flow', onFailure);
  }

  async start(): Promise<void> {
    await connectQuietly(this.redis);
    await this.tick();
    this.timer = setInterval(() => void this.tick(), this.options.intervalMs);
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
      const reply = await this.redis[COMMAND](
        this.replicasKey,
        this.hashPrefix + this.replicaId,
        this.replicaId,
        this.options.peerTtlMs,
        this.hashPrefix,
        MAX_REPLICAS,
        MAX_FIELDS,
        MAX_BYTES,
        MAX_TOTAL_BYTES,
        ...this.ownFields(),
      );
      this.read(reply);
      this.updatedAt = performance.now();
      this.stats.exchanges++;
    } catch (err) {
      // Counted; past peerTtlMs the others' counts are not used (redisLink logs an outage).
      this.failures.noteError(err);
    } finally {
      this.ticking = false;
    }
  }

  /** This replica's counts as hash fields, waiting ones first, cut to what the others accept. */
  private ownFields(): string[] {
    const { inflight, waiting } = this.flow.state();
    const fields: string[] = [];
    const full = () => fields.length >= MAX_FIELDS * 2;
    for (const [model, byClass] of waiting)
      for (const [c, n] of byClass) if (!full()) fields.push(`w${SEP}${model}${SEP}${c}`, String(n));
    for (const [model, byTenant] of inflight)
      for (const [tenant, n] of byTenant)
        if (!full()) fields.push(`i${SEP}${model}${SEP}${tenant}`, String(n));
    return fields;
  }

  private fresh(): boolean {
    return performance.now() - this.updatedAt <= this.options.peerTtlMs;
  }

  private read(reply: unknown): void {
    if (!Array.isArray(reply) || reply.length !== 3 || !Array.isArray(reply[2])) {
      this.failures.note('malformed');
      return;
    }
    this.failures.note('forged', Number(reply[0]) || 0);
    this.failures.note('oversize', Number(reply[1]) || 0);
    const inflight = new Map<string, Map<string, number>>();
    const highest = new Map<string, number>();
    const replicas = reply[2] as unknown[];
    for (const flat of replicas) {
      const counts = Array.isArray(flat) ? this.parseReplica(flat) : undefined;
      if (counts === undefined) {
        this.failures.note('forged');
        continue;
      }
      for (const { kind, model, rest, n } of counts) {
        if (kind === 'i') {
          let byTenant = inflight.get(model);
          if (!byTenant) {
            byTenant = new Map();
            inflight.set(model, byTenant);
          }
          byTenant.set(rest, (byTenant.get(rest) ?? 0) + n);
        } else {
          const c = Number(rest);
          if (c < (highest.get(model) ?? Number.POSITIVE_INFINITY)) highest.set(model, c);
        }
      }
    }
    this.inflightElsewhere = inflight;
    this.highestElsewhere = highest;
    this.replicas = replicas.length;
  }

  /** One replica's counts, or undefined when any field is not one a replica writes. */
  private parseReplica(flat: unknown[]): Count[] | undefined {
    if (flat.length > MAX_FIELDS * 2) return undefined;
    const counts: Count[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const field = String(flat[i]);
      const value = String(flat[i + 1]);
      if (!/^\d{1,7}$/.test(value)) return undefined;
      const n = Number(value);
      if (n > MAX_COUNT) return undefined;
      if (n === 0) continue;
      const first = field.indexOf(SEP);
      const last = field.lastIndexOf(SEP);
      if (first !== 1 || last <= first || field.length > 2 * MAX_NAME + 3) return undefined;
      const kind = field[0] === 'i' ? 'i' : field[0] === 'w' ? 'w' : undefined;
      if (kind === undefined) return undefined;
      const model = field.slice(first + 1, last);
      const rest = field.slice(last + 1);
      if (kind === 'w') {
        if (!/^\d{1,4}$/.test(rest) || Number(rest) >= this.options.classCount) return undefined;
      }
      if (model.length > MAX_NAME || rest.length > MAX_NAME) return undefined;
      counts.push({ kind, model, rest, n });
    }
    return counts;
  }
}

interface Count {
  kind: 'i' | 'w';
  model: string;
  rest: string;
  n: number;
}
