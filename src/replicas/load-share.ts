import type { Redis } from 'ioredis';
import { z } from 'zod';
import type { WorkerRegistry } from '../workers/registry.js';
import { NO_PEER_LOAD, type PeerLoad } from '../workers/worker.js';
import { closeLink, connectQuietly } from './redis-link.js';

/**
 * Replicas see each other's load: every `intervalMs` each replica publishes (Redis PUBLISH, one
 * channel) its requests in flight or queued and its pending prefill per worker, when they
 * changed, and at least every `HEARTBEATS` intervals; every replica subscribes and sets each
 * worker's `elsewhere` to the sum of the others' latest (routing's Candidate.elsewhere).
 *
 * Between two readings of an engine (250 ms) a replica otherwise knows only what it sent itself
 * since: with two replicas behind a balancer, half of what an engine received since its last
 * reading. Engines' readings cannot be taken faster than they update (signals every 100 ms were
 * no better than 250 on the routing benchmark), but the replicas' own counts can be shared at
 * once: absolute counts, not increments, so a lost message is corrected by the next, and a
 * replica not heard from for `EXPIRY_HEARTBEATS` heartbeats (dead, or Redis unreachable) counts
 * for nothing. Pub/sub, not a stream: only the latest counts matter, and nothing is kept.
 *
 * A prompt that becomes pending prefill on a worker that had none is told at once (the next turn
 * of the event loop) rather than at the next interval: while a tenant is heavy, the scorer sends
 * its prompts only to workers with nothing pending, and the others' to workers without a long
 * prompt pending, so two replicas each thinking a worker clear would send both there (on the
 * routing benchmark's (d), the small tenants' slowest requests were those).
 *
 * A message: JSON `{"r": replica id, "w": [[worker id, load, pending prefill], ...]}`, only the
 * workers with something on them (a worker left out has nothing from that replica). Whoever can
 * publish on the shared Redis is trusted as a replica, but what a forged message can do is
 * bounded: counts and workers per message are capped, and so are the replicas remembered.
 */
const HEARTBEATS = 20;
const EXPIRY_HEARTBEATS = 3;
/** Workers in one message at most: a fleet larger than this is cut (the rest count as idle elsewhere). */
const MAX_WORKERS = 10_000;
/** Replicas heard from at most: a message from one more is refused (forged ids would otherwise grow the map). */
const MAX_PEERS = 256;
/** A count past this is not a replica's (a forged or corrupt message): refused. */
const MAX_COUNT = 1_000_000_000;

const messageSchema = z.object({
  r: z.string().min(1).max(100),
  w: z
    .array(
      z.tuple([
        z.string().min(1).max(2048),
        z.number().int().nonnegative().max(MAX_COUNT),
        z.number().nonnegative().max(MAX_COUNT),
      ]),
    )
    .max(MAX_WORKERS),
});

interface Peer {
  /** When its last message arrived (`performance.now()`). */
  heardAt: number;
  loads: Map<string, PeerLoad>;
}

export class LoadShare {
  private readonly peers = new Map<string, Peer>();
  private timer: NodeJS.Timeout | undefined;
  /** A publish at the next turn of the event loop (a prompt started on a worker with none pending). */
  private soon: NodeJS.Immediate | undefined;
  private unlisten: (() => void) | undefined;
  private last = '';
  private sinceSent = 0;
  /** Messages published, publishes lost to an outage, messages applied, messages refused as malformed. */
  readonly stats = { sent: 0, writeFailures: 0, applied: 0, refused: 0 };

  constructor(
    private readonly writer: Redis,
    private readonly subscriber: Redis,
    private readonly channel: string,
    private readonly replicaId: string,
    private readonly registry: WorkerRegistry,
    private readonly intervalMs: number,
  ) {}

  async start(): Promise<void> {
    await Promise.all([connectQuietly(this.writer), connectQuietly(this.subscriber)]);
    this.subscriber.on('message', (channel: string, message: string) => {
      if (channel === this.channel) this.receive(message);
    });
    // ioredis subscribes again by itself after a reconnect, but only to what it once subscribed
    // to: a Redis down at start is subscribed to when it comes (again on each 'ready': harmless).
    this.subscriber.on('ready', () => void this.subscriber.subscribe(this.channel).catch(() => {}));
    await this.subscriber.subscribe(this.channel).catch(() => {});
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.timer.unref();
    this.unlisten = this.registry.onPrefillStart(() => {
      this.soon ??= setImmediate(() => {
        this.soon = undefined;
        this.tick();
      });
    });
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.unlisten?.();
    if (this.soon) clearImmediate(this.soon);
    this.soon = undefined;
    this.peers.clear();
    this.applyAll();
    this.subscriber.disconnect();
    await closeLink(this.writer);
  }

  /** Publishes this replica's counts when they changed (or a heartbeat is due), and forgets replicas gone quiet. */
  tick(): void {
    const gone = performance.now() - this.intervalMs * HEARTBEATS * EXPIRY_HEARTBEATS;
    for (const [id, peer] of this.peers)
      if (peer.heardAt < gone) {
        this.peers.delete(id);
        this.apply(peer.loads.keys());
      }
    const w: [string, number, number][] = [];
    for (const worker of this.registry.list()) {
      const load = worker.load;
      if (load > 0 || worker.pendingPrefill > 0) w.push([worker.id, load, worker.pendingPrefill]);
      if (w.length === MAX_WORKERS) break;
    }
    const message = JSON.stringify({ r: this.replicaId, w });
    this.sinceSent++;
    if (message === this.last && this.sinceSent < HEARTBEATS) return;
    this.last = message;
    this.sinceSent = 0;
    this.writer.publish(this.channel, message).then(
      () => this.stats.sent++,
      // Unreachable (redisLink logs it): the others forget this replica's counts past the expiry.
      () => this.stats.writeFailures++,
    );
  }

  private receive(message: string): void {
    let parsed: z.infer<typeof messageSchema>;
    try {
      parsed = messageSchema.parse(JSON.parse(message));
    } catch {
      this.stats.refused++;
      return;
    }
    if (parsed.r === this.replicaId) return;
    const before = this.peers.get(parsed.r);
    if (before === undefined && this.peers.size >= MAX_PEERS) {
      this.stats.refused++;
      return;
    }
    const loads = new Map<string, PeerLoad>();
    for (const [id, load, pendingPrefill] of parsed.w) loads.set(id, { load, pendingPrefill });
    this.peers.set(parsed.r, { heardAt: performance.now(), loads });
    this.stats.applied++;
    // Only the workers this replica's counts were or are on: a message costs its own size, not the fleet's.
    for (const id of before?.loads.keys() ?? []) {
      if (!loads.has(id)) this.applyOne(id);
    }
    this.apply(loads.keys());
  }

  /** Sets the `elsewhere` of the workers named to the sum of what the replicas heard from have on them. */
  private apply(ids: Iterable<string>): void {
    for (const id of ids) this.applyOne(id);
  }

  private applyOne(id: string): void {
    const worker = this.registry.get(id);
    if (worker !== undefined) worker.elsewhere = this.sumFor(id);
  }

  /** Sets every worker's `elsewhere` afresh. */
  private applyAll(): void {
    for (const worker of this.registry.list()) worker.elsewhere = this.sumFor(worker.id);
  }

  private sumFor(id: string): PeerLoad {
    let load = 0;
    let pendingPrefill = 0;
    for (const peer of this.peers.values()) {
      const on = peer.loads.get(id);
      if (on === undefined) continue;
      load += on.load;
      pendingPrefill += on.pendingPrefill;
    }
    return load === 0 && pendingPrefill === 0 ? NO_PEER_LOAD : { load, pendingPrefill };
  }

  /** Replicas heard from within the expiry (for tests and the log). */
  get replicas(): number {
    return this.peers.size;
  }
}
