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
  /** Calls that ended because the client went away (slow server only). */
  aborted: number;
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
    aborted: 0,
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
    aborted: 0,
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
