import type { Redis } from 'ioredis';
import type { Logger } from '../observability/logger.js';
import type { AffinityIndex } from '../routing/affinity-index.js';
import { closeLink, connectQuietly } from './redis-link.js';

/**
 * Replicas cost no affinity: each replica's scorer decisions (which worker a prompt's blocks
 * went to, as block hashes: no prompt text) are appended to one Redis stream, and every replica
 * reads the others' into its own AffinityIndex. A session's next turn finds the engine of its
 * previous turn whichever replica routed that one, within a round trip to Redis.
 *
 * - Writes are batched per turn of the event loop into one XADD (`MAXLEN ~ streamLength`, the
 *   stream expiring after the index's TTL when nothing is written): what a decision taught, not
 *   every block of every prompt (AffinityListener).
 * - A dedicated connection reads with XREAD BLOCK; a replica that starts first reads the last
 *   `streamLength` entries, so it routes like the others from its first request.
 * - Decisions stay local while Redis is unreachable (each replica then knows its own only); the
 *   reader tries again every second.
 *
 * An entry: `r` the replica's id, `d` lines of `<worker id>\t<block hashes in base 36, comma-separated>`.
 */
export class AffinitySync {
  private pending: string[] = [];
  private flushing: NodeJS.Immediate | undefined;
  private running = false;
  private reading: Promise<void> | undefined;
  private lastId = '0-0';
  /** Decisions queued to send, sent, lost to an outage, and applied from the others (for tests and the log). */
  readonly stats = { queued: 0, sent: 0, writeFailures: 0, applied: 0 };

  constructor(
    private readonly writer: Redis,
    private readonly reader: Redis,
    private readonly key: string,
    private readonly replicaId: string,
    private readonly index: AffinityIndex,
    private readonly streamLength: number,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    this.running = true;
    await Promise.all([connectQuietly(this.writer), connectQuietly(this.reader)]);
    await this.warmUp();
    this.index.onRecord((hashes, workerId) => this.queue(hashes, workerId));
    this.reading = this.readLoop();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.index.onRecord(undefined);
    if (this.flushing) {
      clearImmediate(this.flushing);
      this.flushing = undefined;
      await this.flush();
    }
    // A blocked XREAD ends with its connection.
    this.reader.disconnect();
    await this.reading;
    await closeLink(this.writer);
  }

  private queue(hashes: readonly number[], workerId: string): void {
    let line = `${workerId}\t`;
    for (let i = 0; i < hashes.length; i++) line += (i === 0 ? '' : ',') + hashes[i]!.toString(36);
    this.pending.push(line);
    this.stats.queued++;
    this.flushing ??= setImmediate(() => {
      this.flushing = undefined;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    const lines = this.pending;
    if (lines.length === 0) return;
    this.pending = [];
    try {
      await this.writer
        .multi()
        .xadd(this.key, 'MAXLEN', '~', this.streamLength, '*', 'r', this.replicaId, 'd', lines.join('\n'))
        .pexpire(this.key, this.index.options.ttlMs)
        .exec();
      this.stats.sent += lines.length;
    } catch {
      // Unreachable: this replica's decisions stay its own (redisLink logs the outage).
      this.stats.writeFailures += lines.length;
    }
  }

  /** Reads the decisions already in the stream, oldest first, up to the index's TTL back. */
  private async warmUp(): Promise<void> {
    let entries: [string, string[]][];
    try {
      entries = (await this.writer.xrevrange(this.key, '+', '-', 'COUNT', this.streamLength)) as [
        string,
        string[],
      ][];
    } catch {
      return;
    }
    if (entries.length === 0) return;
    this.lastId = entries[0]![0];
    const newest = idTime(this.lastId);
    const oldest = newest - this.index.options.ttlMs;
    for (let i = entries.length - 1; i >= 0; i--) {
      const [id, fields] = entries[i]!;
      if (idTime(id) >= oldest) this.applyEntry(fields);
    }
    this.log.info({ decisions: this.stats.applied }, 'prefix affinity: read what the other replicas learned');
  }

  private async readLoop(): Promise<void> {
    while (this.running) {
      let reply: [string, [string, string[]][]][] | null;
      try {
        reply = (await this.reader.xread('COUNT', 1000, 'BLOCK', 1000, 'STREAMS', this.key, this.lastId)) as
          | [string, [string, string[]][]][]
          | null;
      } catch {
        if (!this.running) return;
        await new Promise((resolve) => setTimeout(resolve, 1000).unref());
        continue;
      }
      for (const [, entries] of reply ?? []) {
        for (const [id, fields] of entries) {
          this.lastId = id;
          this.applyEntry(fields);
        }
      }
    }
  }

  private applyEntry(fields: string[]): void {
    let replica: string | undefined;
    let data: string | undefined;
    for (let i = 0; i + 1 < fields.length; i += 2) {
      if (fields[i] === 'r') replica = fields[i + 1];
      else if (fields[i] === 'd') data = fields[i + 1];
    }
    if (replica === this.replicaId || data === undefined) return;
    for (const line of data.split('\n')) {
      const tab = line.indexOf('\t');
      if (tab <= 0) continue;
      const hashes = line
        .slice(tab + 1)
        .split(',')
        .map((h) => Number.parseInt(h, 36))
        .filter((h) => Number.isSafeInteger(h));
      if (hashes.length === 0) continue;
      this.index.apply(hashes, line.slice(0, tab));
      this.stats.applied++;
    }
  }
}

/** The Redis server time (ms) of a stream entry id `<ms>-<seq>`. */
function idTime(id: string): number {
  return Number(id.slice(0, id.indexOf('-')));
}
