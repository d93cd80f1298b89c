import { z } from 'zod';

/** A worker found by discovery: `id` is `<namespace>/<pod name>`, stable across URL changes. */
export interface DiscoveredWorker {
  id: string;
  url: string;
  pod: string;
}

/**
 * The few pod fields discovery reads; everything else in the API's pod object is dropped.
 * Fields are `nullish` because the API server omits empty ones and some clients write `null`.
 */
export const podSchema = z.object({
  metadata: z.object({
    name: z.string().min(1),
    namespace: z.string().nullish(),
    uid: z.string().nullish(),
    resourceVersion: z.string().nullish(),
    deletionTimestamp: z.string().nullish(),
    annotations: z.record(z.string(), z.string()).nullish(),
  }),
  status: z
    .object({
      phase: z.string().nullish(),
      podIP: z.string().nullish(),
      conditions: z.array(z.object({ type: z.string(), status: z.string() })).nullish(),
    })
    .nullish(),
});

export type Pod = z.infer<typeof podSchema>;

export interface PodWorkerOptions {
  /** Used when the pod object carries no namespace. */
  namespace: string;
  portAnnotation: string;
  defaultPort: number | undefined;
  scheme: 'http' | 'https';
}

/**
 * What a pod is for discovery: a worker, or not one. `problem` is set when the pod would be a
 * worker but is misconfigured (a bad port annotation, or none and no default port), which is
 * worth a warning; a pod that is merely not ready yet has no problem.
 */
export interface PodVerdict {
  worker: DiscoveredWorker | undefined;
  problem: string | undefined;
}

export function podId(pod: Pod, namespace: string): string {
  return `${pod.metadata.namespace ?? namespace}/${pod.metadata.name}`;
}

function parsePort(value: string): number | undefined {
  if (!/^\d{1,5}$/.test(value.trim())) return undefined;
  const port = Number(value.trim());
  return port >= 1 && port <= 65535 ? port : undefined;
}

/**
 * A pod is a worker when it is Running, has an IP, has the condition Ready=True, and is not
 * being deleted (a terminating pod may still answer, but must get no new requests).
 */
export function evaluatePod(pod: Pod, options: PodWorkerOptions): PodVerdict {
  const none: PodVerdict = { worker: undefined, problem: undefined };
  const status = pod.status;
  if (pod.metadata.deletionTimestamp) return none;
  if (status?.phase !== 'Running') return none;
  const ip = status.podIP;
  if (!ip) return none;
  const ready = status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
  if (!ready) return none;

  const annotated = pod.metadata.annotations?.[options.portAnnotation];
  let port: number | undefined;
  if (annotated !== undefined) {
    port = parsePort(annotated);
    if (port === undefined) {
      return {
        worker: undefined,
        problem: `annotation ${options.portAnnotation}="${annotated}" is not a port`,
      };
    }
  } else {
    port = options.defaultPort;
    if (port === undefined) {
      return {
        worker: undefined,
        problem: `no ${options.portAnnotation} annotation and no default port configured`,
      };
    }
  }
  const host = ip.includes(':') ? `[${ip}]` : ip;
  return {
    worker: {
      id: podId(pod, options.namespace),
      url: `${options.scheme}://${host}:${port}`,
      pod: pod.metadata.name,
    },
    problem: undefined,
  };
}
