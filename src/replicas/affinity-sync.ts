import type { Redis } from 'ioredis';
import type { Logger } from '../observability/logger.js';
import type { AffinityIndex } from '../routing/affinity-index.js';
import { closeLink, connectQuietly } from './redis-link.js';
import { type ShareFailureSink, ShareFailures } from './share-failures.js';

/** Characters of one entry's decisions at most: a writer splits a larger batch, a reader skips a larger entry. */
export const MAX_ENTRY_CHARS = 256 * 1024;
/** Characters of a worker id or replica id at most. */
const MAX_ID_CHARS = 2048;
/** Entries read per XREAD (each at most MAX_ENTRY_CHARS). */
const READ_COUNT = 100;
/** An entry id this far ahead of the Redis server's clock was not made by XADD `*`: forged. */
const FUTURE_SLACK_MS = 60_000;

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
 *
 * Whoever can write to the shared Redis can append an entry; what it can do is bounded by this
 * gateway: an entry past `MAX_ENTRY_CHARS` is skipped unread, a line's hashes are cut to the
 * index's `maxBlocks` (each a safe integer), ids are bounded, and an entry id ahead of the Redis
 * server's clock (which would stop every `XADD *` and every reader after it) is skipped and the
 * stream dropped by the next writer that fails on it. Each is counted (ShareFailures).
 */
export class AffinitySync {
  private pending: string[] = [];
  private flushing: NodeJS.Immediate | undefined;
  private running = false;
  private reading: Promise<void> | undefined;
  private lastId = '0-0';
  /** The Redis server's clock (ms) less this process's monotonic one, from its TIME at start. */
  private serverOffset: number | undefined;
  /** Decisions queued to send, sent, lost to an outage, and applied from the others (for tests and the log). */
  readonly stats = { queued: 0, sent: 0, writeFailures: 0, applied: 0 };
  /** Entries and writes that failed, by cause. */
  readonly failures: ShareFailures;

  constructor(
    private readonly writer: Redis,
    private readonly reader: Redis,
    private readonly key: string,
    private readonly replicaId: string,
    private readonly index: AffinityIndex,
    private readonly streamLength: number,
    private readonly log: Logger,
    onFailure?: ShareFailureSink,
  ) {
    this.failures = new ShareFailures('affinity', onFailure);
  }

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
    const batch = this.writer.multi();
    for (const data of chunks(lines, MAX_ENTRY_CHARS))
      batch.xadd(this.key, 'MAXLEN', '~', this.streamLength, '*', 'r', this.replicaId, 'd', data);
    batch.pexpire(this.key, this.index.options.ttlMs);
    try {
      const results = (await batch.exec()) ?? [];
      const failed = results.find(([err]) => err)?.[0];
      if (failed) throw failed;
      this.stats.sent += lines.length;
    } catch (err) {
      // Unreachable: this replica's decisions stay its own (redisLink logs the outage).
      this.stats.writeFailures += lines.length;
      this.failures.noteError(err);
      // An entry id ahead of the server's clock (forged) refuses every `XADD *`: the stream goes.
      if (err instanceof Error && /equal or smaller than the target stream top item/.test(err.message)) {
        this.failures.note('forged');
        await this.writer.del(this.key).catch(() => {});
      }
    }
  }

  /** Reads the decisions already in the stream, oldest first, up to the index's TTL back. */
  private async warmUp(): Promise<void> {
    let entries: [string, string[]][];
    try {
      const [seconds, micros] = await this.writer.time();
      this.serverOffset = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) - performance.now();
      entries = (await this.writer.xrevrange(this.key, '+', '-', 'COUNT', this.streamLength)) as [
        string,
        string[],
      ][];
    } catch {
      return;
    }
    const forged = entries.findIndex(([id]) => !this.forged(id));
    if (forged > 0) this.failures.note('forged', forged);
    entries = forged < 0 ? [] : entries.slice(forged);
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
        reply = (await this.reader.xread(
          'COUNT',
          READ_COUNT,
          'BLOCK',
          1000,
          'STREAMS',
          this.key,
          this.lastId,
        )) as [string, [string, string[]][]][] | null;
      } catch {
        if (!this.running) return;
        await new Promise((resolve) => setTimeout(resolve, 1000).unref());
        continue;
      }
      for (const [, entries] of reply ?? []) {
        for (const [id, fields] of entries) {
          if (this.forged(id)) {
            // Read on from what is appended next (the writer that fails on it drops the stream).
            this.failures.note('forged');
            this.lastId = '$';
            break;
          }
          this.lastId = id;
          this.applyEntry(fields);
        }
      }
    }
  }

  /** Whether a stream entry id is ahead of the Redis server's clock (not made by XADD `*`). */
  private forged(id: string): boolean {
    if (this.serverOffset === undefined) return false;
    return idTime(id) > performance.now() + this.serverOffset + FUTURE_SLACK_MS;
  }

  private applyEntry(fields: unknown[]): void {
    let replica: unknown;
    let data: unknown;
    for (let i = 0; i + 1 < fields.length; i += 2) {
      if (fields[i] === 'r') replica = fields[i + 1];
      else if (fields[i] === 'd') data = fields[i + 1];
    }
    if (replica === this.replicaId) return;
    if (typeof replica !== 'string' || typeof data !== 'string' || replica.length > MAX_ID_CHARS) {
      this.failures.note('malformed');
      return;
    }
    if (data.length > MAX_ENTRY_CHARS) {
      this.failures.note('oversize');
      return;
    }
    const maxBlocks = this.index.options.maxBlocks;
    let malformed = 0;
    for (const line of data.split('\n')) {
      const tab = line.indexOf('\t');
      if (tab <= 0 || tab > MAX_ID_CHARS) {
        malformed++;
        continue;
      }
      const hashes: number[] = [];
      for (const text of line.slice(tab + 1).split(',', maxBlocks)) {
        const h = Number.parseInt(text, 36);
        if (h >= 0 && Number.isSafeInteger(h)) hashes.push(h);
      }
      if (hashes.length === 0) {
        malformed++;
        continue;
      }
      this.index.apply(hashes, line.slice(0, tab));
      this.stats.applied++;
    }
    this.failures.note('malformed', malformed);
  }
}

/** `lines` joined with newlines, in pieces of at most `max` characters (a longer line is its own piece). */
function chunks(lines: readonly string[], max: number): string[] {
  const out: string[] = [];
  let current = '';
  for (const line of lines) {
    if (current !== '' && current.length + 1 + line.length > max) {
      out.push(current);
      current = '';
    }
    current = current === '' ? line : `${current}\n${line}`;
  }
  if (current !== '') out.push(current);
  return out;
}

/** The Redis server time (ms) of a stream entry id `<ms>-<seq>`. */
function idTime(id: string): number {
  return Number(id.slice(0, id.indexOf('-')));
}
