import type { Redis } from 'ioredis';
import { z } from 'zod';
import type { WorkerRegistry } from '../workers/registry.js';
import { NO_PEER_LOAD, type PeerLoad } from '../workers/worker.js';
import { closeLink, connectQuietly } from './redis-link.js';
import { type ShareFailureSink, ShareFailures } from './share-failures.js';
import { objectWithinDepth } from './wire-bounds.js';

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
 * replica not heard from for `peerTtlMs` on the monotonic clock (dead, or Redis unreachable)
 * counts for nothing: a time, not a number of intervals, so that an event-loop stall of a few
 * seconds on either side drops nobody. A replica that stops says so (`end`): it is forgotten at once.
 * Pub/sub, not a stream: only the latest counts matter, and nothing is kept.
 *
 * A prompt that becomes pending prefill on a worker that had none is told at once (the next turn
 * of the event loop) rather than at the next interval: while a tenant is heavy, the scorer sends
 * its prompts only to workers with nothing pending, and the others' to workers without a long
 * prompt pending, so two replicas each thinking a worker clear would send both there (on the
 * routing benchmark's (d), the small tenants' slowest requests were those).
 *
 * A message: JSON `{"v": 1, "r": replica id, "w": [[worker id, load, pending prefill], ...]}` (and `"end": true` from a replica that stops),
 * only the workers with something on them (a worker left out has nothing from that replica). A
 * newer peer's extra fields and tuple elements are ignored (a rolling upgrade); an older peer's
 * message has no `v`. Whoever can publish on the shared Redis is trusted as a replica, but what
 * a forged message can do is bounded by this gateway: a message past `MAX_MESSAGE_BYTES` is
 * dropped before it is decoded, one nested deeper than the format is dropped after one pass over
 * its bytes (before JSON.parse), counts and workers per message are capped, and so are the
 * replicas remembered. Every refusal is counted by cause (ShareFailures).
 */
const HEARTBEATS = 20;
/** Workers in one message at most: a fleet larger than this is cut (the rest count as idle elsewhere). */
const MAX_WORKERS = 4096;
/** A message's bytes at most, checked before it is decoded or parsed (a sender cuts its own to fit). */
export const MAX_MESSAGE_BYTES = 256 * 1024;
/** Replicas heard from at most: a message from one more is refused (forged ids would otherwise grow the map). */
const MAX_PEERS = 256;
/** A count past this is not a replica's (a forged or corrupt message): refused. */
const MAX_COUNT = 1_000_000_000;
/** This format's version (`v`). A newer peer may add fields and tuple elements: they are ignored. */
const VERSION = 1;

const messageSchema = z.object({
  v: z.number().int().positive().optional(),
  r: z.string().min(1).max(100),
  /** The replica stopped: forget it now. */
  end: z.literal(true).optional(),
  w: z
    .array(
      z.tuple(
        [
          z.string().min(1).max(2048),
          z.number().int().nonnegative().max(MAX_COUNT),
          z.number().nonnegative().max(MAX_COUNT),
        ],
        z.unknown(),
      ),
    )
    .max(MAX_WORKERS),
});

type Message = z.infer<typeof messageSchema>;

interface Peer {
  /** When its last message arrived (`performance.now()`). */
  heardAt: number;
  loads: Map<string, PeerLoad>;
}

/** Nesting of a message at most: the object, its workers, a worker's tuple, and one more for a newer peer's fields. */
const MAX_DEPTH = 4;

export interface LoadShareOptions {
  readonly intervalMs: number;
  /** A replica not heard from for this long (monotonic clock) counts for nothing. */
  readonly peerTtlMs: number;
}

export class LoadShare {
  private readonly peers = new Map<string, Peer>();
  private timer: NodeJS.Timeout | undefined;
  /** A publish at the next turn of the event loop (a prompt started on a worker with none pending). */
  private soon: NodeJS.Immediate | undefined;
  private unlisten: (() => void) | undefined;
  private last = '';
  private sinceSent = 0;
  /** Messages published, publishes lost to an outage, messages applied, messages refused (any cause), replicas forgotten past the expiry. */
  readonly stats = { sent: 0, writeFailures: 0, applied: 0, refused: 0, expired: 0 };
  /** Why messages were refused or publishes failed. */
  readonly failures: ShareFailures;

  constructor(
    private readonly writer: Redis,
    private readonly subscriber: Redis,
    private readonly channel: string,
    private readonly replicaId: string,
    private readonly registry: WorkerRegistry,
    private readonly options: LoadShareOptions,
    onFailure?: ShareFailureSink,
  ) {
    this.failures = new ShareFailures('loads', onFailure);
  }

  async start(): Promise<void> {
    await Promise.all([connectQuietly(this.writer), connectQuietly(this.subscriber)]);
    // Bytes, not text: a message is measured before it is decoded (no 'message' listener: ioredis
    // then decodes nothing).
    this.subscriber.on('messageBuffer', (channel: Buffer, message: Buffer) => {
      if (channel.toString() === this.channel) this.receive(message);
    });
    // ioredis subscribes again by itself after a reconnect, but only to what it once subscribed
    // to: a Redis down at start is subscribed to when it comes (again on each 'ready': harmless).
    this.subscriber.on('ready', () => void this.subscriber.subscribe(this.channel).catch(() => {}));
    await this.subscriber.subscribe(this.channel).catch(() => {});
    this.timer = setInterval(() => this.tick(), this.options.intervalMs);
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
    // The others forget this replica's counts now rather than at the expiry.
    if (this.last !== '' && this.writer.status === 'ready')
      await this.writer.publish(this.channel, this.message([], true)).catch(() => {});
    await closeLink(this.writer);
  }

  /** Publishes this replica's counts when they changed (or a heartbeat is due), and forgets replicas gone quiet. */
  tick(): void {
    const gone = performance.now() - this.options.peerTtlMs;
    for (const [id, peer] of this.peers)
      if (peer.heardAt < gone) {
        this.peers.delete(id);
        this.stats.expired++;
        this.apply(peer.loads.keys());
      }
    const w: [string, number, number][] = [];
    // Cut to what the others accept: the envelope, then each entry and its comma.
    let bytes = 64 + Buffer.byteLength(this.replicaId);
    for (const worker of this.registry.list()) {
      const load = worker.load;
      if (load === 0 && worker.pendingPrefill === 0) continue;
      const entry: [string, number, number] = [worker.id, load, worker.pendingPrefill];
      bytes += Buffer.byteLength(JSON.stringify(entry)) + 1;
      if (bytes > MAX_MESSAGE_BYTES || w.length === MAX_WORKERS) break;
      w.push(entry);
    }
    const message = this.message(w);
    this.sinceSent++;
    if (message === this.last && this.sinceSent < HEARTBEATS) return;
    this.last = message;
    this.sinceSent = 0;
    this.writer.publish(this.channel, message).then(
      () => this.stats.sent++,
      // Unreachable (redisLink logs it): the others forget this replica's counts past the expiry.
      (err: unknown) => {
        this.stats.writeFailures++;
        this.failures.noteError(err);
      },
    );
  }

  private message(w: [string, number, number][], end = false): string {
    return JSON.stringify(
      end ? { v: VERSION, r: this.replicaId, w, end } : { v: VERSION, r: this.replicaId, w },
    );
  }

  private refuse(cause: 'oversize' | 'malformed' | 'peer_limit'): void {
    this.stats.refused++;
    this.failures.note(cause);
  }

  /** A message's content, or why it is refused: bounded before anything is decoded, nested garbage dropped in one pass. */
  private parse(bytes: Buffer): Message | 'oversize' | 'malformed' {
    if (bytes.length > MAX_MESSAGE_BYTES) return 'oversize';
    if (!objectWithinDepth(bytes, MAX_DEPTH)) return 'malformed';
    try {
      const result = messageSchema.safeParse(JSON.parse(bytes.toString()));
      return result.success ? result.data : 'malformed';
    } catch {
      return 'malformed';
    }
  }

  private receive(bytes: Buffer): void {
    const parsed = this.parse(bytes);
    if (typeof parsed === 'string') {
      this.refuse(parsed);
      return;
    }
    if (parsed.r === this.replicaId) return;
    const before = this.peers.get(parsed.r);
    if (before === undefined && this.peers.size >= MAX_PEERS) {
      this.refuse('peer_limit');
      return;
    }
    const loads = new Map<string, PeerLoad>();
    for (const [id, load, pendingPrefill] of parsed.w) loads.set(id, { load, pendingPrefill });
    if (parsed.end) this.peers.delete(parsed.r);
    else this.peers.set(parsed.r, { heardAt: performance.now(), loads });
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
