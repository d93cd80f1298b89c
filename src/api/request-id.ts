import { randomFillSync } from 'node:crypto';

const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Random bytes for this many ids, drawn from the system's generator in one call. */
const IDS_PER_FILL = 256;
const ID_BYTES = 16;
const pool = Buffer.alloc(IDS_PER_FILL * ID_BYTES);
let next = IDS_PER_FILL;

/**
 * 128 random bits as 32 hex digits: one string made from a pool of random bytes (as
 * `randomUUID` keeps one), without the dashes a UUID would have to lose again.
 */
function randomHex(): string {
  if (next === IDS_PER_FILL) {
    randomFillSync(pool);
    next = 0;
  }
  const start = next++ * ID_BYTES;
  return pool.toString('hex', start, start + ID_BYTES);
}

/** A client's X-Request-Id is kept when it is a sane token; otherwise the gateway makes one. */
export function requestId(header: string | string[] | undefined): string {
  if (typeof header === 'string' && CLIENT_REQUEST_ID.test(header)) return header;
  return `req_${randomHex()}`;
}
