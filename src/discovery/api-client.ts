import { readFile } from 'node:fs/promises';
import { Agent, type Dispatcher, request } from 'undici';
import { z } from 'zod';
import { errorMessage, readBounded, statusMessage } from './http.js';
import { type Pod, podSchema } from './pod.js';
import type { DiscoveryLogger } from './types.js';

/*
 * The two requests discovery makes of the Kubernetes API, LIST and WATCH pods in one namespace
 * by label selector, over undici with the cluster's TLS settings and a bearer token read afresh
 * for each request.
 */

const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
export const DEFAULT_TOKEN_FILE = `${SERVICE_ACCOUNT_DIR}/token`;
export const DEFAULT_CA_FILE = `${SERVICE_ACCOUNT_DIR}/ca.crt`;

/** Guards against an API server that keeps handing out `continue` tokens. */
const MAX_LIST_PAGES = 10_000;
/** A `continue` token may expire mid-LIST (410); the LIST restarts this many times. */
const MAX_LIST_RESTARTS = 3;

const listSchema = z.object({
  metadata: z.object({ resourceVersion: z.string().min(1), continue: z.string().nullish() }),
  items: z.array(z.unknown()).nullish(),
});

/** A non-2xx answer of the API server. */
export class KubernetesApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'KubernetesApiError';
  }
}

export interface PodsApiOptions {
  apiServer: string;
  namespace: string;
  labelSelector: string;
  tokenFile?: string;
  caFile?: string;
  token?: string;
  insecureSkipTlsVerify?: boolean;
  requestTimeoutMs: number;
  pageSize: number;
  log: DiscoveryLogger;
}

export interface PodList {
  pods: Pod[];
  resourceVersion: string;
}

/** What opening a WATCH gave: its event stream, or why there is none. */
export type WatchOpening =
  | { kind: 'stream'; body: Dispatcher.ResponseData['body'] }
  | { kind: 'gone' } // 410: the resourceVersion is too old, LIST again
  | { kind: 'failed'; error: string };

export class PodsApi {
  private readonly base: string;
  private warnedNoToken = false;

  private constructor(
    private readonly options: PodsApiOptions,
    private readonly agent: Agent,
  ) {
    this.base = options.apiServer.replace(/\/+$/, '');
  }

  /** Reads the cluster CA (for https without insecureSkipTlsVerify); rejects when a configured one is unreadable. */
  static async create(options: PodsApiOptions): Promise<PodsApi> {
    const insecure = options.insecureSkipTlsVerify ?? false;
    let ca: string | undefined;
    if (options.apiServer.startsWith('https:') && !insecure) {
      const file = options.caFile ?? DEFAULT_CA_FILE;
      try {
        ca = await readFile(file, 'utf8');
      } catch (err) {
        if (options.caFile !== undefined) {
          throw new Error(`cannot read the cluster CA file ${file}: ${errorMessage(err)}`);
        }
        options.log.warn({ caFile: file }, 'no cluster CA file; trusting the system CAs for the API server');
      }
    }
    const agent = new Agent({
      connect: { ...(ca === undefined ? {} : { ca }), rejectUnauthorized: !insecure },
    });
    return new PodsApi(options, agent);
  }

  /** Closes the connections; never rejects. */
  async close(): Promise<void> {
    await this.agent.destroy().catch(() => {});
  }

  /** LISTs every page of pods; restarts when a `continue` token expires. */
  async list(signal: AbortSignal): Promise<PodList> {
    for (let restart = 0; ; restart++) {
      try {
        return await this.listPages(signal);
      } catch (err) {
        if (!(err instanceof KubernetesApiError && err.status === 410) || restart >= MAX_LIST_RESTARTS)
          throw err;
      }
    }
  }

  /**
   * Opens a WATCH from `resourceVersion`, with bookmarks, which the server ends after
   * `timeoutSeconds`. Rejects when the token file cannot be read or the request fails.
   */
  async watch(resourceVersion: string, timeoutSeconds: number, signal: AbortSignal): Promise<WatchOpening> {
    const url = this.podsUrl({
      watch: '1',
      resourceVersion,
      allowWatchBookmarks: 'true',
      timeoutSeconds: String(timeoutSeconds),
    });
    // The body timeout bounds the silence on the stream: the server sends a bookmark about
    // every minute and ends the watch after timeoutSeconds, so longer means a dead connection.
    const { statusCode, body } = await this.get(url, signal, (timeoutSeconds + 30) * 1000);
    if (statusCode === 410) {
      await readBounded(body);
      return { kind: 'gone' };
    }
    if (statusCode !== 200) {
      const text = await readBounded(body);
      return { kind: 'failed', error: `WATCH pods answered HTTP ${statusCode}: ${statusMessage(text)}` };
    }
    return { kind: 'stream', body };
  }

  private async listPages(signal: AbortSignal): Promise<PodList> {
    const pods: Pod[] = [];
    let token: string | undefined;
    for (let page = 0; page < MAX_LIST_PAGES; page++) {
      const query: Record<string, string> = { limit: String(this.options.pageSize) };
      if (token !== undefined) query.continue = token;
      const { statusCode, body } = await this.get(this.podsUrl(query), signal, this.options.requestTimeoutMs);
      if (statusCode !== 200) {
        const text = await readBounded(body);
        throw new KubernetesApiError(
          statusCode,
          `LIST pods answered HTTP ${statusCode}: ${statusMessage(text)}`,
        );
      }
      const parsed = listSchema.safeParse(await body.json());
      if (!parsed.success) throw new Error('LIST pods answered something that is not a pod list');
      for (const item of parsed.data.items ?? []) {
        const pod = podSchema.safeParse(item);
        if (pod.success) pods.push(pod.data);
        else this.options.log.warn({}, 'LIST pods held an item that is not a pod; skipped');
      }
      token = parsed.data.metadata.continue ?? undefined;
      if (!token) return { pods, resourceVersion: parsed.data.metadata.resourceVersion };
    }
    throw new Error(`LIST pods did not end after ${MAX_LIST_PAGES} pages`);
  }

  /** The Authorization header value, the token file read afresh (projected tokens rotate). */
  private async authorization(): Promise<string | undefined> {
    if (this.options.token !== undefined) return `Bearer ${this.options.token}`;
    const file = this.options.tokenFile ?? DEFAULT_TOKEN_FILE;
    let token: string;
    try {
      token = (await readFile(file, 'utf8')).trim();
    } catch (err) {
      // Out of the cluster (`kubectl proxy`) there is no default token file: go unauthenticated.
      const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
      if (this.options.tokenFile !== undefined || !missing) {
        throw new Error(`cannot read the token file ${file}: ${errorMessage(err)}`);
      }
      token = '';
    }
    if (token.length === 0) {
      if (!this.warnedNoToken)
        this.options.log.warn({ tokenFile: file }, 'no service account token; requests are unauthenticated');
      this.warnedNoToken = true;
      return undefined;
    }
    return `Bearer ${token}`;
  }

  private podsUrl(query: Record<string, string>): string {
    const path = `/api/v1/namespaces/${encodeURIComponent(this.options.namespace)}/pods`;
    const params = new URLSearchParams({ labelSelector: this.options.labelSelector, ...query });
    return `${this.base}${path}?${params}`;
  }

  private async get(url: string, signal: AbortSignal, bodyTimeout: number) {
    const authorization = await this.authorization();
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': 'sluice-discovery' };
    if (authorization !== undefined) headers.authorization = authorization;
    return request(url, {
      method: 'GET',
      headers,
      signal,
      dispatcher: this.agent,
      headersTimeout: this.options.requestTimeoutMs,
      bodyTimeout,
    });
  }
}
