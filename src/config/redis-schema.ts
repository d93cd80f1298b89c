import { z } from 'zod';

/**
 * Redis, shared by several gateway replicas (README "Several replicas"): rate limits, and what
 * the replicas tell each other of routing (src/replicas). A single process does without.
 */
export const redisSchema = z
  .strictObject({
    url: z
      .string()
      .refine((value) => URL.canParse(value) && /^rediss?:$/.test(new URL(value).protocol), {
        error: (issue) =>
          `'${String(issue.input)}' is not a Redis URL: write redis://host:6379 (or rediss:// for TLS)`,
      })
      .optional(),
    keyPrefix: z.string().default('sluice:'),
    /**
     * How long another replica's shared counts (its worker loads, flow control's counts) are used
     * after it was last heard from, on the monotonic clock. Long enough that an event-loop stall of
     * 2 s on either replica drops nobody; a replica that stops says so at once. The same on every
     * replica: an entry in Redis that would outlive it is refused as forged.
     */
    peerTtlMs: z.number().int().min(100).max(60_000).default(5_000),
  })
  .prefault({});
