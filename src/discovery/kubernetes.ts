import { readFile } from 'node:fs/promises';
import { Agent, request } from 'undici';
import { z } from 'zod';
import { Backoff, sleep } from './backoff.js';
import { errorMessage, linkedAbort, readBounded, statusMessage } from './http.js';
import { ndjsonLines } from './ndjson.js';
import {
  type DiscoveredWorker,
  evaluatePod,
  type Pod,
  type PodWorkerOptions,
  podId,
  podSchema,
} from './pod.js';

/*
 * Worker discovery from the Kubernetes API, written by hand on purpose: it needs two endpoints
 * (LIST and WATCH pods in one namespace), and the official @kubernetes/client-node is a large
 * dependency tree (its generated models, a fetch polyfill, a WebSocket client, a YAML parser,
 * auth plugins) for them. What it does here is what client-go's reflector does: LIST, then WATCH
 * from the list's resourceVersion, resume a broken watch from the last resourceVersion seen,
 * and LIST again (diffing against what is known) when that resourceVersion has expired (410).
 */

export type { DiscoveredWorker } from './pod.js';

/** The pino methods discovery uses; a pino `Logger` fits. */
export interface DiscoveryLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface DiscoveryHandlers {
  /** A pod became a worker, or its URL changed (then `onRemove` for its id came first). */
  onAdd(worker: DiscoveredWorker): void;
  /** A worker's pod stopped being one (not ready, terminating, deleted, misconfigured). */
  onRemove(id: string): void;
}

export interface KubernetesDiscoveryOptions {
  /** The API server, e.g. https://kubernetes.default.svc (a path prefix is kept). */
  apiServer: string;
  namespace: string;
  /** A label selector, e.g. `app=vllm`. */
  labelSelector: string;
  /** The pod annotation holding the worker's port; default `sluice.io/port`. */
  portAnnotation?: string;
  /** The port of a pod without the annotation; without one, such a pod is not a worker. */
  defaultPort?: number;
  /** Scheme of the worker URLs; default http. */
  scheme?: 'http' | 'https';
  /** Bearer token file, re-read on every (re)connect as projected tokens rotate. */
  tokenFile?: string;
  /** The cluster CA; when the default one is missing the system CAs are used. */
  caFile?: string;
  /** A fixed token instead of the token file (tests, out-of-cluster use). */
  token?: string;
  insecureSkipTlsVerify?: boolean;
  /** LIST again and diff this often, a safety net for missed events; 0 turns it off. Default 5 min. */
  resyncMs?: number;
  /** First delay before reconnecting after a failure; doubles up to `backoffMaxMs`. Default 500. */
  backoffInitialMs?: number;
  /** Default 30 000. */
  backoffMaxMs?: number;
  /** Asks the API server to end each watch after this long (it is then resumed). Default 300. */
  watchTimeoutSeconds?: number;
  /** Time to the response headers, and for a whole LIST page. Default 30 000. */
  requestTimeoutMs?: number;
  /** Pods per LIST page. Default 500. */
  pageSize?: number;
  logger?: DiscoveryLogger;
}

const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
export const DEFAULT_TOKEN_FILE = `${SERVICE_ACCOUNT_DIR}/token`;
export const DEFAULT_CA_FILE = `${SERVICE_ACCOUNT_DIR}/ca.crt`;
export const DEFAULT_PORT_ANNOTATION = 'sluice.io/port';

/** Guards against an API server that keeps handing out `continue` tokens. */
const MAX_LIST_PAGES = 10_000;
/** A `continue` token may expire mid-LIST (410); the LIST restarts this many times. */
const MAX_LIST_RESTARTS = 3;

const listSchema = z.object({
  metadata: z.object({ resourceVersion: z.string().min(1), continue: z.string().nullish() }),
  items: z.array(z.unknown()).nullish(),
});
const eventSchema = z.object({ type: z.string(), object: z.unknown() });
const statusSchema = z.object({
  code: z.number().nullish(),
  reason: z.string().nullish(),
  message: z.string().nullish(),
});
const bookmarkSchema = z.object({ metadata: z.object({ resourceVersion: z.string().min(1) }) });

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

type WatchEnd =
  | { kind: 'ended' } // the server closed the stream
  | { kind: 'gone' } // 410: the resourceVersion is too old, LIST again
  | { kind: 'resync' } // the resync interval is up, LIST again
  | { kind: 'stopped' }
  | { kind: 'failed'; error: string };

const silentLogger: DiscoveryLogger = { info() {}, warn() {}, error() {} };

export class KubernetesDiscovery {
  private readonly base: string;
  private readonly podOptions: PodWorkerOptions;
  private readonly log: DiscoveryLogger;
  private readonly resyncMs: number;
  private readonly backoffInitialMs: number;
  private readonly backoffMaxMs: number;
  private readonly watchTimeoutSeconds: number;
  private readonly requestTimeoutMs: number;
  private readonly pageSize: number;

  private readonly stopper = new AbortController();
  private handlers: DiscoveryHandlers | undefined;
  private agent: Agent | undefined;
  private starting: Promise<void> | undefined;
  private loop: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;

  /** Workers delivered to the handlers and not removed since, by id. */
  private readonly known = new Map<string, DiscoveredWorker>();
  /** The last problem warned about for a pod, so that each is logged once. */
  private readonly problems = new Map<string, string>();
  private resourceVersion: string | undefined;
  private lastListAt = 0;
  private warnedNoToken = false;

  constructor(private readonly options: KubernetesDiscoveryOptions) {
    this.base = options.apiServer.replace(/\/+$/, '');
    this.podOptions = {
      namespace: options.namespace,
      portAnnotation: options.portAnnotation ?? DEFAULT_PORT_ANNOTATION,
      defaultPort: options.defaultPort,
      scheme: options.scheme ?? 'http',
    };
    this.log = options.logger ?? silentLogger;
    this.resyncMs = options.resyncMs ?? 5 * 60_000;
    this.backoffInitialMs = options.backoffInitialMs ?? 500;
    this.backoffMaxMs = options.backoffMaxMs ?? 30_000;
    this.watchTimeoutSeconds = options.watchTimeoutSeconds ?? 300;
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    this.pageSize = options.pageSize ?? 500;
  }

  /**
   * LISTs the pods and delivers the workers among them, then resolves and goes on WATCHing in
   * the background until `stop`. Rejects when the first LIST fails (unreachable API server,
   * missing RBAC), so that a misconfiguration shows at start; later failures are retried.
   */
  start(handlers: DiscoveryHandlers): Promise<void> {
    if (this.handlers || this.stopper.signal.aborted) {
      return Promise.reject(new Error('KubernetesDiscovery can only start once'));
    }
    this.handlers = handlers;
    this.starting = this.begin();
    return this.starting;
  }

  /** Ends the watch and every timer; no handler is called and no request made once it resolves. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.stopper.abort();
      await this.starting?.catch(() => {});
      await this.loop;
      await this.agent?.destroy().catch(() => {});
    })();
    return this.stopping;
  }

  /** The workers known now. */
  workers(): DiscoveredWorker[] {
    return [...this.known.values()].map((w) => ({ ...w }));
  }

  private async begin(): Promise<void> {
    const signal = this.stopper.signal;
    try {
      this.agent = await this.createAgent();
      await this.relist(signal);
    } catch (err) {
      if (signal.aborted) return;
      await this.agent?.destroy().catch(() => {});
      this.stopper.abort();
      throw err;
    }
    if (signal.aborted) return;
    this.loop = this.run(signal).catch((err: unknown) => {
      this.log.error({ err }, 'kubernetes discovery stopped on an unexpected error');
    });
  }

  private async createAgent(): Promise<Agent> {
    const insecure = this.options.insecureSkipTlsVerify ?? false;
    let ca: string | undefined;
    if (this.base.startsWith('https:') && !insecure) {
      const file = this.options.caFile ?? DEFAULT_CA_FILE;
      try {
        ca = await readFile(file, 'utf8');
      } catch (err) {
        if (this.options.caFile !== undefined) {
          throw new Error(`cannot read the cluster CA file ${file}: ${errorMessage(err)}`);
        }
        this.log.warn({ caFile: file }, 'no cluster CA file; trusting the system CAs for the API server');
      }
    }
    return new Agent({ connect: { ...(ca === undefined ? {} : { ca }), rejectUnauthorized: !insecure } });
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
        this.log.warn({ tokenFile: file }, 'no service account token; requests are unauthenticated');
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
      headersTimeout: this.requestTimeoutMs,
      bodyTimeout,
    });
  }

  /** LISTs every page of pods; restarts when a `continue` token expires. */
  private async listPods(signal: AbortSignal): Promise<{ pods: Pod[]; resourceVersion: string }> {
    for (let restart = 0; ; restart++) {
      try {
        return await this.listPages(signal);
      } catch (err) {
        if (!(err instanceof KubernetesApiError && err.status === 410) || restart >= MAX_LIST_RESTARTS)
          throw err;
      }
    }
  }

  private async listPages(signal: AbortSignal): Promise<{ pods: Pod[]; resourceVersion: string }> {
    const pods: Pod[] = [];
    let token: string | undefined;
    for (let page = 0; page < MAX_LIST_PAGES; page++) {
      const query: Record<string, string> = { limit: String(this.pageSize) };
      if (token !== undefined) query.continue = token;
      const { statusCode, body } = await this.get(this.podsUrl(query), signal, this.requestTimeoutMs);
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
        else this.log.warn({}, 'LIST pods held an item that is not a pod; skipped');
      }
      token = parsed.data.metadata.continue ?? undefined;
      if (!token) return { pods, resourceVersion: parsed.data.metadata.resourceVersion };
    }
    throw new Error(`LIST pods did not end after ${MAX_LIST_PAGES} pages`);
  }

  /** LISTs, then delivers the differences with what is known: removals first, then additions. */
  private async relist(signal: AbortSignal): Promise<void> {
    const { pods, resourceVersion } = await this.listPods(signal);
    if (signal.aborted) return;
    const next = new Map<string, DiscoveredWorker>();
    const present = new Set<string>();
    for (const pod of pods) {
      const id = podId(pod, this.options.namespace);
      present.add(id);
      const worker = this.verdict(id, pod);
      if (worker) next.set(id, worker);
    }
    for (const id of this.problems.keys()) if (!present.has(id)) this.problems.delete(id);
    for (const [id, worker] of this.known) {
      if (next.get(id)?.url !== worker.url) this.remove(id);
    }
    for (const worker of next.values()) {
      if (!this.known.has(worker.id)) this.add(worker);
    }
    this.resourceVersion = resourceVersion;
    this.lastListAt = Date.now();
    this.log.info({ workers: this.known.size, resourceVersion }, 'kubernetes discovery listed pods');
  }

  private async run(signal: AbortSignal): Promise<void> {
    const backoff = new Backoff(this.backoffInitialMs, this.backoffMaxMs);
    let needList = false;
    while (!signal.aborted) {
      if (this.resyncMs > 0 && Date.now() - this.lastListAt >= this.resyncMs) needList = true;
      if (needList) {
        try {
          await this.relist(signal);
          needList = false;
        } catch (err) {
          if (signal.aborted) break;
          const delayMs = backoff.next();
          this.log.warn({ err: errorMessage(err), delayMs }, 'kubernetes discovery LIST failed; retrying');
          await sleep(delayMs, signal);
          continue;
        }
      }
      let progressed = false;
      const end = await this.watch(signal, () => {
        if (!progressed) backoff.reset();
        progressed = true;
      });
      if (signal.aborted || end.kind === 'stopped') break;
      if (end.kind === 'resync') {
        needList = true;
        continue;
      }
      const delayMs = backoff.next();
      if (end.kind === 'gone') {
        needList = true;
        this.log.info(
          { resourceVersion: this.resourceVersion },
          'watch resourceVersion expired; listing again',
        );
      } else if (end.kind === 'ended') {
        this.log.info({ resourceVersion: this.resourceVersion, delayMs }, 'kubernetes watch ended; resuming');
      } else {
        this.log.warn(
          { err: end.error, resourceVersion: this.resourceVersion, delayMs },
          'kubernetes watch failed; resuming',
        );
      }
      await sleep(delayMs, signal);
    }
  }

  /** One WATCH from the last resourceVersion, until the stream ends, fails, or must LIST again. */
  private async watch(stop: AbortSignal, onProgress: () => void): Promise<WatchEnd> {
    const link = linkedAbort(stop);
    const resyncTimer =
      this.resyncMs > 0
        ? setTimeout(
            () => link.controller.abort('resync'),
            Math.max(0, this.lastListAt + this.resyncMs - Date.now()),
          )
        : undefined;
    try {
      const url = this.podsUrl({
        watch: '1',
        resourceVersion: this.resourceVersion ?? '',
        allowWatchBookmarks: 'true',
        timeoutSeconds: String(this.watchTimeoutSeconds),
      });
      // The body timeout bounds the silence on the stream: the server sends a bookmark about
      // every minute and ends the watch after timeoutSeconds, so longer means a dead connection.
      const bodyTimeout = (this.watchTimeoutSeconds + 30) * 1000;
      const { statusCode, body } = await this.get(url, link.controller.signal, bodyTimeout);
      if (statusCode === 410) {
        await readBounded(body);
        return { kind: 'gone' };
      }
      if (statusCode !== 200) {
        const text = await readBounded(body);
        return { kind: 'failed', error: `WATCH pods answered HTTP ${statusCode}: ${statusMessage(text)}` };
      }
      for await (const line of ndjsonLines(body)) {
        const end = this.handleEvent(line);
        if (end === 'applied') onProgress();
        else if (end !== 'skipped') return end;
      }
      return { kind: 'ended' };
    } catch (err) {
      if (stop.aborted) return { kind: 'stopped' };
      if (link.controller.signal.aborted && link.controller.signal.reason === 'resync')
        return { kind: 'resync' };
      return { kind: 'failed', error: errorMessage(err) };
    } finally {
      clearTimeout(resyncTimer);
      link.dispose();
      if (!link.controller.signal.aborted) link.controller.abort('done');
    }
  }

  private handleEvent(line: string): 'applied' | 'skipped' | WatchEnd {
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      return { kind: 'failed', error: 'the watch stream sent a line that is not JSON' };
    }
    const event = eventSchema.safeParse(json);
    if (!event.success)
      return { kind: 'failed', error: 'the watch stream sent something that is not an event' };
    const { type, object } = event.data;
    switch (type) {
      case 'ADDED':
      case 'MODIFIED':
      case 'DELETED': {
        const pod = podSchema.safeParse(object);
        if (!pod.success) {
          this.log.warn({ type }, 'watch event without a pod; skipped');
          return 'skipped';
        }
        this.applyPod(pod.data, type === 'DELETED');
        if (pod.data.metadata.resourceVersion) this.resourceVersion = pod.data.metadata.resourceVersion;
        return 'applied';
      }
      case 'BOOKMARK': {
        const bookmark = bookmarkSchema.safeParse(object);
        if (!bookmark.success) return 'skipped';
        this.resourceVersion = bookmark.data.metadata.resourceVersion;
        return 'applied';
      }
      case 'ERROR': {
        const status = statusSchema.safeParse(object);
        const { code, reason, message } = status.success ? status.data : {};
        if (code === 410 || reason === 'Expired' || reason === 'Gone') return { kind: 'gone' };
        return {
          kind: 'failed',
          error: `watch ERROR event ${code ?? '?'} ${reason ?? ''}: ${message ?? ''}`,
        };
      }
      default:
        this.log.warn({ type }, 'unknown watch event type; skipped');
        return 'skipped';
    }
  }

  private applyPod(pod: Pod, deleted: boolean): void {
    const id = podId(pod, this.options.namespace);
    let worker: DiscoveredWorker | undefined;
    if (deleted) this.problems.delete(id);
    else worker = this.verdict(id, pod);
    const known = this.known.get(id);
    if (known && worker && known.url === worker.url) return;
    if (known) this.remove(id);
    if (worker) this.add(worker);
  }

  /** The worker a pod is, if any; warns once about each misconfiguration. */
  private verdict(id: string, pod: Pod): DiscoveredWorker | undefined {
    const { worker, problem } = evaluatePod(pod, this.podOptions);
    if (problem === undefined) this.problems.delete(id);
    else if (this.problems.get(id) !== problem) {
      this.problems.set(id, problem);
      this.log.warn({ pod: id, problem }, 'pod is not used as a worker');
    }
    return worker;
  }

  private add(worker: DiscoveredWorker): void {
    this.known.set(worker.id, worker);
    this.log.info({ worker: worker.id, url: worker.url }, 'discovered worker');
    try {
      this.handlers?.onAdd({ ...worker });
    } catch (err) {
      this.log.error({ err, worker: worker.id }, 'discovery onAdd handler threw');
    }
  }

  private remove(id: string): void {
    this.known.delete(id);
    this.log.info({ worker: id }, 'discovered worker gone');
    try {
      this.handlers?.onRemove(id);
    } catch (err) {
      this.log.error({ err, worker: id }, 'discovery onRemove handler threw');
    }
  }
}
