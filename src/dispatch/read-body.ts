import type { Dispatcher as UndiciDispatcher } from 'undici';
import { EngineFinishFailure, NORMAL_FINISH_REASONS } from '../errors/stream-errors.js';
import type { Hold } from '../memory/held-bytes.js';

/** Reading an engine's non-streaming answer: bounded, and checked for a finish that is a failure. */

/** Reads at most `limit` bytes of a body (an engine's error answer), then lets the rest go. */
export async function readLimited(
  body: UndiciDispatcher.ResponseData['body'],
  limit: number,
): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      const buf = chunk as Buffer;
      parts.push(buf);
      size += buf.length;
      if (size >= limit) {
        body.destroy();
        break;
      }
    }
  } catch {
    // the body broke off; what arrived is enough to report
  }
  return Buffer.concat(parts).subarray(0, limit);
}

/** Thrown by readBounded past its limit. */
export class BodyTooLarge extends Error {}

/** Thrown by readBounded when the gateway's budget of what requests hold has no room for more. */
export class HeldFull extends Error {}

/**
 * Reads a whole body, refusing (before buffering it) one larger than `limit` bytes, or one whose
 * bytes the gateway's budget (`hold`) has no room for. With listeners, not `for await`: an async
 * iterator per answer costs more than the read itself.
 */
export function readBounded(
  response: UndiciDispatcher.ResponseData,
  limit: number,
  hold?: Hold,
): Promise<Buffer> {
  const body = response.body;
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    body.destroy();
    return Promise.reject(new BodyTooLarge());
  }
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    body.on('data', (buf: Buffer) => {
      size += buf.length;
      if (size > limit || (hold !== undefined && !hold.set(size))) {
        reject(size > limit ? new BodyTooLarge() : new HeldFull());
        body.destroy();
        return;
      }
      parts.push(buf);
    });
    let ended = false;
    body.once('end', () => {
      ended = true;
      resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
    });
    body.once('error', reject);
    // Destroyed without an error: no 'end' will come (what `for await` reports as a premature close).
    // Every body closes, so the error (an Error captures a stack: about 15 µs) is made only then.
    body.once('close', () => {
      if (!ended) reject(Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }));
    });
  });
}

/** A non-streaming answer whose choice ended with an abort, an error or no known finish reason. */
export function failedFinishOf(
  json: Record<string, unknown>,
  requestId: string,
): EngineFinishFailure | undefined {
  const choices = json.choices;
  if (!Array.isArray(choices)) return undefined;
  for (const choice of choices) {
    const reason = (choice as { finish_reason?: unknown } | null)?.finish_reason;
    if (reason === null || reason === undefined) continue;
    if (typeof reason !== 'string' || !NORMAL_FINISH_REASONS.has(reason)) {
      return new EngineFinishFailure(requestId, reason);
    }
  }
  return undefined;
}
