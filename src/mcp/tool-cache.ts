import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { McpTool } from './client.js';

/**
 * Tool lists per MCP server, reused for `mcp.toolCacheMs`. The key is the server URL and a hash
 * of the headers sent to it (a server may list different tools to different credentials); the
 * headers themselves are never kept. Bounded to 256 servers.
 */
export class McpToolCache {
  private readonly cache: LRUCache<string, McpTool[]> | undefined;

  constructor(ttlMs: number) {
    this.cache = ttlMs > 0 ? new LRUCache<string, McpTool[]>({ max: 256, ttl: ttlMs }) : undefined;
  }

  static key(url: string, headers: Record<string, string>): string {
    const sorted = Object.entries(headers)
      .map(([k, v]) => [k.toLowerCase(), v])
      .sort(([a], [b]) => (a! < b! ? -1 : a! > b! ? 1 : 0));
    return `${url}\n${createHash('sha256').update(JSON.stringify(sorted)).digest('hex')}`;
  }

  get(key: string): McpTool[] | undefined {
    return this.cache?.get(key);
  }

  set(key: string, tools: McpTool[]): void {
    this.cache?.set(key, tools);
  }
}
