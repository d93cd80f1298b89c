import { z } from 'zod';

/** The settings of the Responses API's tools and files: MCP servers and PDFs. */

const positiveInt = z.number().int().positive();
const nonNegativeInt = z.number().int().nonnegative();

/** The `mcp` settings: the MCP servers requests may name, and the bounds of what they may cost. */
export const mcpSettingsSchema = z
  .strictObject({
    /** URL patterns of the MCP servers requests may name (README "MCP tools": what a pattern matches); none by default. */
    allowedServers: z.array(z.string().min(1)).default([]),
    /** Most MCP tool calls in one response (a request's `max_tool_calls` may lower it). */
    maxToolCalls: positiveInt.default(16),
    /** Most engine turns of one response's tool loop; default maxToolCalls + 2. */
    maxTurns: positiveInt.optional(),
    /** Bound of one MCP tool call (and of connecting, and of one page of a tool list). */
    callTimeoutMs: positiveInt.default(30_000),
    /** Bound of all the MCP work of one response; past it the engine gets no more MCP tools. */
    totalTimeoutMs: positiveInt.default(300_000),
    /** How long a server's tool list is reused. */
    toolCacheMs: nonNegativeInt.default(60_000),
    /** Most MCP servers (`mcp` tools) in one request; more is a 400 (`too_many_mcp_servers`). */
    maxServersPerRequest: positiveInt.default(8),
    /** Most MCP servers of one request connected to (listed) at once. */
    connectConcurrency: positiveInt.default(4),
    /** Bound of listing one server's tools: connecting and every page together. */
    listTimeoutMs: positiveInt.default(30_000),
    /** Most pages of one server's tool list (`nextCursor`); more fails the listing. */
    maxListPages: positiveInt.default(8),
    /** Most tools one server may list; more fails the listing. */
    maxToolsPerServer: positiveInt.default(128),
    /** Most bytes of one tool's definition as JSON (name, description, input schema, annotations). */
    maxToolBytes: positiveInt.default(65_536),
    /** Deepest nesting (objects and arrays) of one tool's input schema. */
    maxToolSchemaDepth: positiveInt.default(32),
    /** Most bytes (UTF-8) of one tool call's output; a larger one is cut (mcp_call error `mcp_output_too_large`). */
    maxOutputBytes: positiveInt.default(1_048_576),
  })
  .transform((mcp) => ({ ...mcp, maxTurns: mcp.maxTurns ?? mcp.maxToolCalls + 2 }));

export const filesSchema = z.strictObject({
  /**
   * PDFs are read (pdf.js) in processes of their own, each bounded; one past a bound is refused
   * with 400 `file_too_complex`. What a PDF gave is kept by its content hash, so that a chain
   * of responses (previous_response_id) reads each PDF once.
   */
  pdf: z
    .strictObject({
      /** Longest one PDF may be read for; past it its reader is killed. */
      timeoutMs: positiveInt.default(10_000),
      /** Memory one PDF's reader may take: its JS heap, and the buffers it decodes streams into, each. */
      maxMemoryMb: z.number().int().min(32).default(256),
      /** PDFs read at once (one process each). */
      concurrency: positiveInt.default(2),
      /** PDFs waiting for a reader; past it a request is refused with 503 `file_parser_busy`. */
      maxQueued: nonNegativeInt.default(64),
      /** Texts of PDFs kept by content hash, in MB. */
      cacheMb: positiveInt.default(64),
    })
    .prefault({}),
});
