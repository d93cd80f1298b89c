import type { IncomingHttpHeaders } from 'node:http';

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
