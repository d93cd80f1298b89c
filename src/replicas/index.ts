import { randomUUID } from 'node:crypto';
import type { SluiceConfig } from '../config/schema.js';
import type { FlowControl } from '../flow/flow-control.js';
import type { Logger } from '../observability/logger.js';
import type { AffinityIndex } from '../routing/affinity-index.js';
import type { WorkerRegistry } from '../workers/registry.js';
import { AffinitySync } from './affinity-sync.js';
import { FlowShare } from './flow-share.js';
import { LoadShare } from './load-share.js';
import { redisLink } from './redis-link.js';
import type { ShareFailureCause, ShareFailureSink } from './share-failures.js';

export { SHARE_CHANNELS, SHARE_FAILURE_CAUSES, type ShareFailureSink } from './share-failures.js';

/** What `GET /admin/replicas` shows of the sharing (nothing shared: `enabled` false). */
export interface SharingSnapshot {
  id: string;
  enabled: boolean;
  peerTtlMs: number;
  affinity?: { stats: Record<string, number>; failures: Record<ShareFailureCause, number> };
  loads?: { replicas: number; stats: Record<string, number>; failures: Record<ShareFailureCause, number> };
  flow?: { replicas: number; stats: Record<string, number>; failures: Record<ShareFailureCause, number> };
}

/** Whether some model is routed by the scorer (the default policy, or a model's own). */
function scorerInUse(config: SluiceConfig): boolean {
  return (
    config.routing.policy === 'scorer' || Object.values(config.models).some((m) => m.policy === 'scorer')
  );
}

/**
 * What gateway replicas share of routing through the Redis of `redis.url` (README "Several
 * replicas"): the scorer's prefix affinity (affinity-sync.ts), each replica's load on each
 * worker (load-share.ts) and flow control's counts (flow-share.ts). Nothing without `redis.url`, or when no model is routed by the scorer.
 */
export class ReplicaSharing {
  readonly id = randomUUID();
  readonly affinity: AffinitySync | undefined;
  readonly flow: FlowShare | undefined;
  readonly load: LoadShare | undefined;
  private readonly peerTtlMs: number;

  constructor(
    config: SluiceConfig,
    affinity: AffinityIndex,
    registry: WorkerRegistry,
    flow: FlowControl | undefined,
    log: Logger,
    /** Told of every sharing failure (the gateway's `sluice_replica_share_failures_total`). */
    onFailure?: ShareFailureSink,
  ) {
    this.peerTtlMs = config.redis.peerTtlMs;
    const url = config.redis.url;
    if (url === undefined || !scorerInUse(config)) return;
    const prefix = config.redis.keyPrefix;
    const shared = config.routing.scorer.affinity;
    if (shared.share) {
      this.affinity = new AffinitySync(
        redisLink(url, log, 'prefix affinity'),
        redisLink(url, log, 'prefix affinity', true),
        `${prefix}affinity`,
        this.id,
        affinity,
        shared.streamLength,
        log,
        onFailure,
      );
    }
    const loadShareMs = config.routing.scorer.loadShareMs;
    if (loadShareMs > 0) {
      this.load = new LoadShare(
        redisLink(url, log, 'worker loads'),
        redisLink(url, log, 'worker loads', true),
        `${prefix}loads`,
        this.id,
        registry,
        { intervalMs: loadShareMs, peerTtlMs: config.redis.peerTtlMs },
        onFailure,
      );
    }
    if (flow) {
      this.flow = new FlowShare(
        redisLink(url, log, 'flow control'),
        prefix,
        this.id,
        flow,
        {
          intervalMs: config.flow.shareIntervalMs,
          peerTtlMs: config.redis.peerTtlMs,
          classCount: config.flow.classes.length,
        },
        onFailure,
      );
      flow.setPeers(this.flow);
    }
  }

  async start(): Promise<void> {
    await Promise.all([this.affinity?.start(), this.load?.start(), this.flow?.start()]);
  }

  snapshot(): SharingSnapshot {
    const { affinity, load, flow } = this;
    return {
      id: this.id,
      enabled: affinity !== undefined || load !== undefined || flow !== undefined,
      peerTtlMs: this.peerTtlMs,
      ...(affinity && {
        affinity: { stats: { ...affinity.stats }, failures: { ...affinity.failures.counts } },
      }),
      ...(load && {
        loads: { replicas: load.replicas, stats: { ...load.stats }, failures: { ...load.failures.counts } },
      }),
      ...(flow && {
        flow: { replicas: flow.replicas, stats: { ...flow.stats }, failures: { ...flow.failures.counts } },
      }),
    };
  }

  async stop(): Promise<void> {
    await Promise.all([this.affinity?.stop(), this.load?.stop(), this.flow?.stop()]);
  }
}
