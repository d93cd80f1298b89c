import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { McpTool } from './tool-list.js';

/** Most characters of tool definitions kept in the cache, all servers together. */
const MAX_CACHED_CHARS = 64 * 1024 * 1024;

/**
 * Tool lists per MCP server, reused for `mcp.toolCacheMs`. The key is the server URL and a hash
 * of the headers sent to it (a server may list different tools to different credentials); the
 * headers themselves are never kept. Bounded to 256 servers and 64 Mi characters of definitions
 * (one list is bounded by mcp.maxToolsPerServer x mcp.maxToolBytes).
 */
export class McpToolCache {
  private readonly cache: LRUCache<string, McpTool[]> | undefined;

  constructor(ttlMs: number) {
    this.cache =
      ttlMs > 0
        ? new LRUCache<string, McpTool[]>({
            max: 256,
            ttl: ttlMs,
            maxSize: MAX_CACHED_CHARS,
            sizeCalculation: (tools) => Math.max(1, JSON.stringify(tools).length),
          })
        : undefined;
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
