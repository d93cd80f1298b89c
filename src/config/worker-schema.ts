import { z } from 'zod';
import { METRIC_NAMES } from './metric-names.js';

/** A worker (an engine's URL) and what the gateway knows of it: `workers[]` and `POST /admin/workers`. */
const positiveInt = z.number().int().positive();
const nonNegativeInt = z.number().int().nonnegative();

/** An http(s) URL; a bare host:port is told what it lacks. */
export const httpUrl = z.url({
  protocol: /^https?$/,
  error: (issue) => {
    const input = typeof issue.input === 'string' ? issue.input : '';
    return /^[\w.-]+:\d+(\/.*)?$/.test(input) || /^[\w.-]+$/.test(input)
      ? `'${input}' lacks its scheme: write http://${input}`
      : `'${input}' is not an http:// or https:// URL`;
  },
});

export const workerLimitsSchema = z.strictObject({
  /** Requests sent to the worker at once; more wait in its queue. */
  maxConcurrent: positiveInt,
  /** Requests that may wait for a slot; beyond that the gateway answers 503. */
  queueSize: nonNegativeInt,
  /** Longest a request waits in the queue before a 503. */
  queueTimeoutMs: positiveInt,
});

export const workerSchema = z.strictObject({
  url: httpUrl,
  id: z.string().min(1).optional(),
  /** Models served; discovered from the worker's /v1/models when absent. */
  models: z.array(z.string().min(1)).min(1).optional(),
  maxConcurrent: positiveInt.optional(),
  queueSize: nonNegativeInt.optional(),
  queueTimeoutMs: positiveInt.optional(),
  /** Data-parallel ranks behind this URL (vLLM --data-parallel-size). */
  dpSize: positiveInt.optional(),
  /**
   * Its engine's batch: requests it runs at once (vLLM `--max-num-seqs`, SGLang
   * `--max-running-requests`, llama.cpp `--parallel`). What the gateway sends past it waits in the
   * engine's queue, so flow control holds a burst in the gateway from the first request, before
   * the engine has reported a full batch. Default: what the engine reports (SGLang's
   * `sglang:max_running_requests`), else what the scorer learnt, else
   * `routing.scorer.saturation.defaultBatch`.
   */
  maxBatch: positiveInt.optional(),
  /** Bearer key the gateway sends to this worker. */
  apiKey: z.string().min(1).optional(),
  healthPath: z.string().startsWith('/').optional(),
  /**
   * How its engine orders waiting requests (vLLM `--scheduling-policy`, SGLang
   * `--enable-priority-scheduling`): with `priority`, sluice sets each request's `priority` (its
   * flow-control class, then one step back when its tenant is heavy: see `flow.heavyShare`),
   * overriding the client's. With `fcfs` (the default) the body is sent as it is.
   */
  schedulingPolicy: z.enum(['fcfs', 'priority']).optional(),
  /**
   * Where and how its engine's Prometheus metrics are read (see `signals`): the path, and whose
   * metric names (`auto`: vLLM's, SGLang's or llama.cpp's, whichever it has; `none`: not read,
   * sluice's own counts stand for them).
   */
  metrics: z
    .strictObject({
      path: z.string().startsWith('/').default('/metrics'),
      names: z.enum(METRIC_NAMES).default('auto'),
    })
    .optional(),
});
