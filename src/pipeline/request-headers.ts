import type { IncomingHttpHeaders } from 'node:http';
import { MalformedDataParallelRank } from '../errors/request-content-errors.js';
import { InvalidValue } from '../errors/request-errors.js';

/* A client request's headers: those sluice reads itself, and those it passes on to engines. */

/** The first of a header's values (Node gives a repeated header as an array). */
function firstValue(header: string | string[] | undefined): string | undefined {
  return Array.isArray(header) ? header[0] : header;
}

/** A header's first value. */
export function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
  return firstValue(headers[name]);
}

/** `X-Data-Parallel-Rank`: the engine rank a request asks for (vLLM data parallelism). */
export function parseRank(header: string | string[] | undefined): number | undefined {
  if (header === undefined) return undefined;
  const raw = firstValue(header);
  const rank = Number(raw);
  if (raw === undefined || raw.trim() === '' || !Number.isInteger(rank) || rank < 0) {
    throw new MalformedDataParallelRank(raw);
  }
  return rank;
}

/** `X-Sluice-Resume: on|off` turns mid-stream resume on or off for one request. */
export function parseResumeHeader(header: string | string[] | undefined): boolean | undefined {
  if (header === undefined) return undefined;
  const value = firstValue(header)?.trim().toLowerCase();
  if (value === 'on' || value === 'true' || value === '1') return true;
  if (value === 'off' || value === 'false' || value === '0') return false;
  throw new InvalidValue(`X-Sluice-Resume must be on or off, got '${value}'.`, 'x-sluice-resume');
}

/** Never forwarded, whatever the allowlist says: credentials and hop-by-hop headers. */
const NEVER = new Set([
  'authorization',
  'cookie',
  'proxy-authorization',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'host',
  'content-length',
  'content-type',
  'accept',
  'x-request-id',
]);

/**
 * Picks the client headers passed on to engines by an allowlist (exact names, or prefixes
 * written `x-foo-*`), so that credentials, cookies and hop-by-hop headers never reach a worker.
 */
export function headerForwarder(
  allowlist: readonly string[],
): (headers: IncomingHttpHeaders) => Record<string, string> {
  const exact = allowlist.filter((n) => !n.endsWith('*') && !NEVER.has(n));
  const prefixes = allowlist.filter((n) => n.endsWith('*')).map((n) => n.slice(0, -1));
  return (headers) => {
    const out: Record<string, string> = {};
    for (const name of exact) {
      const value = headers[name];
      if (typeof value === 'string') out[name] = value;
    }
    if (prefixes.length > 0) {
      for (const [name, value] of Object.entries(headers)) {
        if (typeof value === 'string' && !NEVER.has(name) && prefixes.some((p) => name.startsWith(p)))
          out[name] = value;
      }
    }
    return out;
  };
}
