import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

/** How a test MCP server's one tool behaves when called. */
export type McpBehaviour = 'answer' | 'error' | 'die' | 'slow';

export interface TestMcpServer {
  /** The Streamable HTTP endpoint, `http://127.0.0.1:<port>/mcp`. */
  url: string;
  /** The name of its tool. */
  tool: string;
  /** Tool calls received (their arguments). */
  calls: Record<string, unknown>[];
  /** When each tool call was received (`performance.now()`), in the order of `calls`. */
  callTimes: number[];
  /** Calls that ended because the client went away (slow server only). */
  aborted: number;
  /** When each of those calls ended (`performance.now()`), in the order of `aborted`. */
  abortTimes: number[];
  /** The headers of every HTTP request it received. */
  headers: IncomingHttpHeaders[];
  close(): Promise<void>;
}

const TOOLS: Record<McpBehaviour, string> = {
  answer: 'echo',
  error: 'explode',
  die: 'vanish',
  slow: 'dawdle',
};

/**
 * A real MCP server built with the official SDK (McpServer + StreamableHTTPServerTransport,
 * stateless: one server and transport per HTTP request) on node:http, 127.0.0.1, an ephemeral
 * port. Its one tool takes `{ text: string }` and, by behaviour: answers `echo: <text>`; returns
 * a tool error (`isError`); destroys the socket mid-call; or answers only after `slowMs`.
 */
export async function startMcpServer(behaviour: McpBehaviour, slowMs = 5_000): Promise<TestMcpServer> {
  const tool = TOOLS[behaviour];
  const sockets = new Set<Socket>();
  const state: TestMcpServer = {
    url: '',
    tool,
    calls: [],
    callTimes: [],
    aborted: 0,
    abortTimes: [],
    headers: [],
    close: async () => {},
  };
  const handle = async (req: IncomingMessage, res: import('node:http').ServerResponse) => {
    state.headers.push({ ...req.headers });
    if (!req.url?.startsWith('/mcp')) {
      res.writeHead(404).end();
      return;
    }
    const server = new McpServer({ name: `test-${behaviour}`, version: '1.0.0' });
    server.registerTool(
      tool,
      { description: `The ${behaviour} tool`, inputSchema: { text: z.string() } },
      async ({ text }, extra): Promise<CallToolResult> => {
        state.calls.push({ text });
        state.callTimes.push(performance.now());
        if (behaviour === 'error')
          return { isError: true, content: [{ type: 'text', text: 'boom: the tool broke' }] };
        if (behaviour === 'die') {
          req.socket.destroy();
          return new Promise<CallToolResult>(() => {});
        }
        if (behaviour === 'slow') {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, slowMs);
            extra.signal.addEventListener('abort', () => {
              clearTimeout(timer);
              state.aborted++;
              state.abortTimes.push(performance.now());
              resolve();
            });
          });
        }
        return { content: [{ type: 'text', text: `echo: ${text}` }] };
      },
    );
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: false,
    });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  };
  const http: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  });
  http.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  state.url = `http://127.0.0.1:${port}/mcp`;
  state.close = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      http.close(() => resolve());
    });
  return state;
}

/**
 * An MCP server that speaks only the older HTTP+SSE transport (the SDK's SSEServerTransport):
 * `GET /sse` opens the event stream, `POST /messages?sessionId=` carries the client's messages,
 * and a Streamable HTTP POST to `/sse` is a 405. Its one tool is `echo`.
 */
export async function startSseMcpServer(): Promise<TestMcpServer> {
  const { SSEServerTransport } = await import('@modelcontextprotocol/sdk/server/sse.js');
  const transports = new Map<string, InstanceType<typeof SSEServerTransport>>();
  const sockets = new Set<Socket>();
  const state: TestMcpServer = {
    url: '',
    tool: 'echo',
    calls: [],
    callTimes: [],
    aborted: 0,
    abortTimes: [],
    headers: [],
    close: async () => {},
  };
  const http: Server = createServer((req, res) => {
    state.headers.push({ ...req.headers });
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    if (req.method === 'GET' && url.pathname === '/sse') {
      const transport = new SSEServerTransport('/messages', res);
      transports.set(transport.sessionId, transport);
      const server = new McpServer({ name: 'test-sse', version: '1.0.0' });
      server.registerTool(
        'echo',
        { description: 'The echo tool', inputSchema: { text: z.string() } },
        async ({ text }): Promise<CallToolResult> => {
          state.calls.push({ text });
          state.callTimes.push(performance.now());
          return { content: [{ type: 'text', text: `echo: ${text}` }] };
        },
      );
      res.on('close', () => {
        transports.delete(transport.sessionId);
        void server.close();
      });
      void server.connect(transport);
      return;
    }
    if (req.method === 'POST' && url.pathname === '/messages') {
      const transport = transports.get(url.searchParams.get('sessionId') ?? '');
      if (!transport) {
        res.writeHead(404).end();
        return;
      }
      void transport.handlePostMessage(req, res);
      return;
    }
    res.writeHead(405, { allow: 'GET' }).end();
  });
  http.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  state.url = `http://127.0.0.1:${port}/sse`;
  state.close = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      http.close(() => resolve());
    });
  return state;
}

/** One page of a scripted server's tool list. */
export interface ToolPage {
  tools: Record<string, unknown>[];
  nextCursor?: string | undefined;
}

export interface ScriptedMcpOptions {
  /** The tool list page for a cursor (undefined: the first page). */
  list: (cursor: string | undefined) => ToolPage;
  /** Waits this long before answering each page. */
  listDelayMs?: number;
  /** The result of a tool call. */
  call?: (name: string, args: Record<string, unknown>) => CallToolResult;
  /**
   * Answers a tool call with an event that never ends: `data:` with a JSON text that grows
   * until the client stops reading (or `endlessLimitBytes` were written).
   */
  endless?: boolean;
  endlessLimitBytes?: number;
  /** Counts the tools/list requests being answered at once across servers. */
  gauge?: { now: number; max: number };
}

export interface ScriptedMcpServer extends TestMcpServer {
  /** tools/list requests received. */
  pages: number;
  /** Bytes written by an endless answer so far, and whether its connection was closed. */
  endless: { written: number; closed: boolean };
}

/**
 * A real MCP server built with the official SDK's low-level Server (Streamable HTTP, stateless,
 * 127.0.0.1) whose tool list and tool results are scripted, to misbehave in ways McpServer cannot:
 * pages without end, huge or deep tool definitions, slow pages, and an output without end
 * (written by hand on the same endpoint, as the SDK would, never finishing its one event).
 */
export async function startScriptedMcpServer(options: ScriptedMcpOptions): Promise<ScriptedMcpServer> {
  const { Server: LowLevelServer } = await import('@modelcontextprotocol/sdk/server/index.js');
  const { ListToolsRequestSchema, CallToolRequestSchema } = await import(
    '@modelcontextprotocol/sdk/types.js'
  );
  const sockets = new Set<Socket>();
  const state: ScriptedMcpServer = {
    url: '',
    tool: '',
    calls: [],
    callTimes: [],
    aborted: 0,
    abortTimes: [],
    headers: [],
    pages: 0,
    endless: { written: 0, closed: false },
    close: async () => {},
  };
  const readBody = (req: IncomingMessage) =>
    new Promise<unknown>((resolve, reject) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        try {
          resolve(text === '' ? undefined : JSON.parse(text));
        } catch (err) {
          reject(err);
        }
      });
      req.on('error', reject);
    });
  const writeEndless = async (res: import('node:http').ServerResponse, id: unknown) => {
    const limit = options.endlessLimitBytes ?? 256 * 1024 * 1024;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.on('close', () => {
      state.endless.closed = true;
    });
    const head = `event: message\ndata: {"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"text","text":"`;
    res.write(head);
    state.endless.written += head.length;
    const chunk = Buffer.alloc(64 * 1024, 'x');
    while (!res.destroyed && state.endless.written < limit) {
      state.endless.written += chunk.length;
      if (!res.write(chunk))
        await new Promise<void>((resolve) => {
          const done = () => {
            res.off('drain', done);
            res.off('close', done);
            resolve();
          };
          res.on('drain', done);
          res.on('close', done);
        });
    }
    res.end();
  };
  const handle = async (req: IncomingMessage, res: import('node:http').ServerResponse) => {
    state.headers.push({ ...req.headers });
    if (req.method !== 'POST') {
      res.writeHead(405, { allow: 'POST' }).end();
      return;
    }
    const body = (await readBody(req)) as { method?: string; id?: unknown; params?: unknown } | undefined;
    if (options.endless && body?.method === 'tools/call') {
      state.calls.push((body.params as { arguments?: Record<string, unknown> })?.arguments ?? {});
      state.callTimes.push(performance.now());
      await writeEndless(res, body.id);
      return;
    }
    const server = new LowLevelServer(
      { name: 'scripted', version: '1.0.0' },
      { capabilities: { tools: {} } },
    );
    server.setRequestHandler(ListToolsRequestSchema, async (request) => {
      state.pages++;
      const gauge = options.gauge;
      if (gauge) gauge.max = Math.max(gauge.max, ++gauge.now);
      try {
        if (options.listDelayMs) await new Promise((resolve) => setTimeout(resolve, options.listDelayMs));
        return options.list(request.params?.cursor) as never;
      } finally {
        if (gauge) gauge.now--;
      }
    });
    server.setRequestHandler(CallToolRequestSchema, async (request) => {
      const args = request.params.arguments ?? {};
      state.calls.push(args);
      state.callTimes.push(performance.now());
      return (options.call?.(request.params.name, args) ?? { content: [] }) as never;
    });
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  };
  const http: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  });
  http.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  state.url = `http://127.0.0.1:${port}/mcp`;
  state.close = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      http.close(() => resolve());
    });
  return state;
}

/** A plain HTTP server (not MCP) answering every request with `status`, `headers` and `body`. */
export async function startPlainServer(
  status: number,
  body: string,
  headers: Record<string, string> = { 'content-type': 'text/html' },
): Promise<{ url: string; port: number; requests: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const state = { url: '', port: 0, requests: 0, close: async () => {} };
  const http: Server = createServer((req, res) => {
    state.requests++;
    req.resume();
    res.writeHead(status, headers).end(body);
  });
  http.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  state.port = (http.address() as AddressInfo).port;
  state.url = `http://127.0.0.1:${state.port}`;
  state.close = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      http.close(() => resolve());
    });
  return state;
}
