/**
 * What went wrong sharing with the other replicas, counted per channel and cause (a bounded set
 * of each: `sluice_replica_share_failures_total{channel, cause}` and `GET /admin/replicas`).
 *
 * - `unreachable`: a write or read that did not reach Redis (down, or a command timed out).
 * - `script`: Redis answered with an error (a script error, a key of the wrong type).
 * - `oversize`: a message or entry past the gateway's byte bound, dropped before it was parsed.
 * - `malformed`: a message or entry that is not one a replica writes.
 * - `peer_limit`: a message from one replica more than the gateway remembers.
 * - `forged`: an entry whose expiry, size or counts are past what the gateway allows (removed or skipped).
 */
export const SHARE_CHANNELS = ['affinity', 'loads', 'flow'] as const;
export type ShareChannel = (typeof SHARE_CHANNELS)[number];

export const SHARE_FAILURE_CAUSES = [
  'unreachable',
  'script',
  'oversize',
  'malformed',
  'peer_limit',
  'forged',
] as const;
export type ShareFailureCause = (typeof SHARE_FAILURE_CAUSES)[number];

/** Told of each failure (the gateway's metrics). */
export type ShareFailureSink = (channel: ShareChannel, cause: ShareFailureCause, times: number) => void;

/** One channel's failures by cause, told to the sink as they happen. */
export class ShareFailures {
  readonly counts: Record<ShareFailureCause, number> = {
    unreachable: 0,
    script: 0,
    oversize: 0,
    malformed: 0,
    peer_limit: 0,
    forged: 0,
  };

  constructor(
    private readonly channel: ShareChannel,
    private readonly sink: ShareFailureSink = () => {},
  ) {}

  note(cause: ShareFailureCause, times = 1): void {
    if (times <= 0) return;
    this.counts[cause] += times;
    this.sink(this.channel, cause, times);
  }

  /** A failed Redis command: an error Redis answered with, or one that never reached it. */
  noteError(err: unknown): void {
    this.note(err instanceof Error && err.name === 'ReplyError' ? 'script' : 'unreachable');
  }

  get total(): number {
    let n = 0;
    for (const cause of SHARE_FAILURE_CAUSES) n += this.counts[cause];
    return n;
  }
}
