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

  constructor(
    config: SluiceConfig,
    affinity: AffinityIndex,
    registry: WorkerRegistry,
    flow: FlowControl | undefined,
    log: Logger,
  ) {
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
        loadShareMs,
      );
    }
    if (flow) {
      this.flow = new FlowShare(
        redisLink(url, log, 'flow control'),
        prefix,
        this.id,
        flow,
        config.flow.shareIntervalMs,
      );
      flow.setPeers(this.flow);
    }
  }

  async start(): Promise<void> {
    await Promise.all([this.affinity?.start(), this.load?.start(), this.flow?.start()]);
  }

  async stop(): Promise<void> {
    await Promise.all([this.affinity?.stop(), this.load?.stop(), this.flow?.stop()]);
  }
}
