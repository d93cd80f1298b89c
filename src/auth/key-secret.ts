import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * The secret form of a virtual API key: `sk-sluice-` and 40 random base62 characters (about 238
 * bits). Only its SHA-256 digest is stored. A slow password hash (bcrypt, scrypt) protects
 * guessable human passwords; a random secret this long cannot be brute-forced from its digest,
 * so a fast hash is enough and keeps authentication cheap on every request.
 */
export const KEY_SCHEME = 'sk-sluice-';
const SECRET_LENGTH = 40;
const DISPLAY_PREFIX_LENGTH = 12;
const SECRET_FORMAT = /^sk-sluice-[0-9A-Za-z]{40}$/;

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
/** 4 × 62: bytes below it map onto the alphabet uniformly; the rest are drawn again (no modulo bias). */
const UNBIASED_BYTE_LIMIT = 248;

export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length)) {
      if (byte < UNBIASED_BYTE_LIMIT && out.length < length) out += BASE62[byte % 62];
    }
  }
  return out;
}

export function generateSecret(): string {
  return KEY_SCHEME + randomBase62(SECRET_LENGTH);
}

/** Lowercase hex SHA-256 of the secret: the stored form. */
export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** The first characters of the secret, safe to show in listings. */
export function keyPrefix(secret: string): string {
  return secret.slice(0, DISPLAY_PREFIX_LENGTH);
}

/** Rejects malformed tokens before any hashing or database lookup. */
export function isWellFormedSecret(token: string): boolean {
  return SECRET_FORMAT.test(token);
}

/** Compares two hex digests in constant time, so timing reveals nothing about how much matched. */
export function hashesEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, 'hex');
  const right = Buffer.from(b, 'hex');
  return left.length === right.length && left.length > 0 && timingSafeEqual(left, right);
}

/** The token of an `Authorization: Bearer <token>` header; undefined when absent or another scheme. */
export function bearerToken(authorization: string | undefined): string | undefined {
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization ?? '');
  return match?.[1];
}
