import type { DiscoveredWorker } from './pod.js';

/** The pino methods discovery uses; a pino `Logger` fits. */
export interface DiscoveryLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export const silentLogger: DiscoveryLogger = { info() {}, warn() {}, error() {} };

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
