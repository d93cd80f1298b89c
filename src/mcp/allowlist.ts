/**
 * The MCP servers a request may name: `mcp.allowedServers` (`SLUICE_MCP_ALLOWED_SERVERS`), URL
 * patterns where `*` matches any run of characters and everything else matches itself. Empty
 * (the default) allows none. A URL is compared in its normalised form (`new URL(u).href`).
 */
export class McpAllowlist {
  private readonly patterns: RegExp[];

  constructor(patterns: readonly string[]) {
    this.patterns = patterns.map(
      (pattern) => new RegExp(`^${pattern.split('*').map(escapeRegExp).join('.*')}$`, 's'),
    );
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
    return this.patterns.some((p) => p.test(normalised) || p.test(url));
  }
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
