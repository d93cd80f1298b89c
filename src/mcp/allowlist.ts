import { isIP } from 'node:net';

/**
 * The MCP servers a request may name: `mcp.allowedServers` (`SLUICE_MCP_ALLOWED_SERVERS`), URL
 * patterns where `*` matches any run of characters (within the host and port, any run without
 * `/?#@`) and everything else matches itself. Empty (the default) allows none. A URL is compared
 * in its normalised form (`new URL(u).href`); one with credentials or another scheme never passes.
 *
 * Text is not all: the address a URL leads to is checked too (see address.ts). A pattern whose
 * host is written out, without `*`, as `localhost` or an IP address names that host, and only
 * such a pattern lets a URL through to a loopback, link-local, metadata or unspecified address.
 */
export class McpAllowlist {
  private readonly patterns: { regex: RegExp; namesHost: boolean }[];

  constructor(patterns: readonly string[]) {
    this.patterns = patterns.map((p) => ({ regex: compile(p), namesHost: namesHost(p) }));
  }

  get empty(): boolean {
    return this.patterns.length === 0;
  }

  allows(url: string): boolean {
    let normalised: string;
    try {
      const parsed = new URL(url);
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return false;
      // Credentials in the URL would be sent to the server and stored with the response.
      if (parsed.username !== '' || parsed.password !== '') return false;
      normalised = parsed.href;
    } catch {
      return false;
    }
    return this.patterns.some((p) => p.regex.test(normalised));
  }

  /** Whether a pattern that names its host (`localhost` or an IP address, no `*`) allows `url`. */
  namesHostOf(url: string): boolean {
    if (!this.allows(url)) return false;
    const normalised = new URL(url).href;
    return this.patterns.some((p) => p.namesHost && p.regex.test(normalised));
  }
}

/** Whether a pattern's host is `localhost` or an IP address, written out (no `*`). */
function namesHost(pattern: string): boolean {
  const scheme = pattern.indexOf('://');
  if (scheme < 0) return false;
  const slash = pattern.indexOf('/', scheme + 3);
  const authority = pattern.slice(scheme + 3, slash < 0 ? undefined : slash);
  const host = authority.startsWith('[')
    ? authority.slice(1, authority.indexOf(']'))
    : authority.replace(/:[^:]*$/, '');
  if (host.includes('*')) return false;
  return host.toLowerCase() === 'localhost' || isIP(host) !== 0;
}

/**
 * A pattern as a regular expression. In the scheme and authority (up to the first `/` after
 * `://`) a `*` stays inside them: it never matches `/`, `?`, `#` or `@`, so that
 * `https://*.tools.example.com/*` cannot be met by `https://evil.example/?.tools.example.com/`.
 */
function compile(pattern: string): RegExp {
  const scheme = pattern.indexOf('://');
  const slash = scheme < 0 ? -1 : pattern.indexOf('/', scheme + 3);
  const authority = slash < 0 ? pattern : pattern.slice(0, slash);
  const rest = slash < 0 ? '' : pattern.slice(slash);
  const glob = (text: string, star: string) => text.split('*').map(escapeRegExp).join(star);
  return new RegExp(`^${glob(authority, '[^/?#@]*')}${glob(rest, '.*')}$`, 's');
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
