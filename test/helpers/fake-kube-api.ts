import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { vi } from 'vitest';

/** A simulated Kubernetes API server: the pod LIST and WATCH of one namespace, driven by a test. */
export type Json = Record<string, unknown>;

export const NS = 'ml';
export const TOKEN = 'test-token';

export interface PodSpec {
  ip?: string | null;
  phase?: string;
  ready?: boolean;
  port?: string | null;
  deleting?: boolean;
  rv?: string;
}

export function pod(name: string, spec: PodSpec = {}): Json {
  const {
    ip = '10.0.0.1',
    phase = 'Running',
    ready = true,
    port = '8000',
    deleting = false,
    rv = '1',
  } = spec;
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: {
      name,
      namespace: NS,
      uid: `uid-${name}`,
      resourceVersion: rv,
      labels: { app: 'vllm' },
      annotations: port === null ? { other: 'x' } : { 'sluice.io/port': port },
      ...(deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
    },
    spec: { containers: [{ name: 'vllm', image: 'vllm' }] },
    status: {
      phase,
      ...(ip === null ? {} : { podIP: ip }),
      conditions: [
        { type: 'PodScheduled', status: 'True' },
        { type: 'Ready', status: ready ? 'True' : 'False' },
      ],
    },
  };
}

interface RecordedRequest {
  kind: 'list' | 'watch' | 'other';
  path: string;
  query: URLSearchParams;
  authorization: string | undefined;
}

export class WatchStream {
  closed = false;
  constructor(
    readonly query: URLSearchParams,
    private readonly res: ServerResponse,
  ) {
    res.on('close', () => {
      this.closed = true;
    });
  }
  send(type: string, object: Json): void {
    this.res.write(`${JSON.stringify({ type, object })}\n`);
  }
  raw(text: string): void {
    this.res.write(text);
  }
  bookmark(resourceVersion: string): void {
    this.send('BOOKMARK', { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion } });
  }
  error(code: number, reason: string): void {
    this.send('ERROR', {
      kind: 'Status',
      apiVersion: 'v1',
      status: 'Failure',
      code,
      reason,
      message: reason,
    });
  }
  end(): void {
    this.res.end();
  }
}

/** A simulated API server: the pod LIST and WATCH of one namespace, driven by the test. */
export class FakeApi {
  readonly requests: RecordedRequest[] = [];
  readonly watches: WatchStream[] = [];
  pods: Json[] = [];
  listRv = '100';
  token = TOKEN;
  /** Status codes answered, in turn, instead of the next LISTs / WATCHes. */
  readonly listFailures: number[] = [];
  readonly watchFailures: number[] = [];
  /** LISTs are then never answered. */
  hangLists = false;
  url = '';
  private readonly server: Server = createServer((req, res) => this.handle(req, res));

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  count(kind: 'list' | 'watch'): number {
    return this.requests.filter((r) => r.kind === kind).length;
  }

  /** The `index`th watch stream opened (waits for it). */
  watch(index: number): Promise<WatchStream> {
    return vi.waitFor(
      () => {
        const stream = this.watches[index];
        if (!stream) throw new Error(`watch ${index} not opened yet`);
        return stream;
      },
      { timeout: 3000, interval: 5 },
    );
  }

  private status(res: ServerResponse, code: number, reason: string): void {
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message: reason }),
    );
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://api');
    const podsPath = url.pathname === `/api/v1/namespaces/${NS}/pods`;
    const kind = !podsPath ? 'other' : url.searchParams.get('watch') === '1' ? 'watch' : 'list';
    this.requests.push({
      kind,
      path: url.pathname,
      query: url.searchParams,
      authorization: req.headers.authorization,
    });
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      this.status(res, 401, 'Unauthorized');
      return;
    }
    if (kind === 'other') {
      this.status(res, 404, 'NotFound');
      return;
    }
    if (kind === 'list') {
      if (this.hangLists) return;
      const failure = this.listFailures.shift();
      if (failure !== undefined) {
        this.status(res, failure, failure === 410 ? 'Expired' : 'Failure');
        return;
      }
      const from = Number(url.searchParams.get('continue') ?? '0');
      const limit = Number(url.searchParams.get('limit') ?? '500');
      const items = this.pods.slice(from, from + limit);
      const next = from + limit < this.pods.length ? String(from + limit) : undefined;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          kind: 'PodList',
          apiVersion: 'v1',
          metadata: { resourceVersion: this.listRv, ...(next ? { continue: next } : {}) },
          items,
        }),
      );
      return;
    }
    const failure = this.watchFailures.shift();
    if (failure !== undefined) {
      this.status(res, failure, failure === 410 ? 'Expired' : 'Failure');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    this.watches.push(new WatchStream(url.searchParams, res));
  }
}
