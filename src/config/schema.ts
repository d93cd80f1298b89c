import { homedir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { POLICY_NAMES } from '../routing/types.js';
import { filesSchema, mcpSettingsSchema } from './feature-schemas.js';
import { MODEL_KINDS } from './model-kind.js';
import { redisSchema } from './redis-schema.js';
import { flowSchema, modelScorerSchema, scorerSchema } from './routing-schemas.js';
import { workerLimitsSchema, workerSchema } from './worker-schema.js';

/**
 * The whole configuration of a gateway, validated at start. Every field has a default so that
 * `sluice serve --worker URL` is a complete configuration.
 */
const positiveInt = z.number().int().positive();
const nonNegativeInt = z.number().int().nonnegative();

export const policyNameSchema = z.enum(POLICY_NAMES);

export { workerLimitsSchema, workerSchema } from './worker-schema.js';

/** A web origin (scheme, host and port: `https://app.example`), kept as the URL standard serialises it. */
const origin = z
  .string()
  .refine(
    (value) => {
      if (!URL.canParse(value)) return false;
      const url = new URL(value);
      return /^https?:$/.test(url.protocol) && url.pathname === '/' && !url.search && !url.hash;
    },
    {
      error: (issue) =>
        `'${String(issue.input)}' is not an origin: write scheme://host[:port], such as https://app.example`,
    },
  )
  .transform((value) => new URL(value).origin);

const timeoutsShape = {
  /**
   * Time to the upstream response headers (the engine accepted the request). A route that does
   * not answer within it is not tried again for the request: another worker or the next model is.
   */
  headersMs: positiveInt,
  /**
   * A stream's time from its headers to its first output: a route silent that long is left as
   * above. Default 30 s, at most `idleMs` and half of `deadlineMs` (model-settings.ts).
   */
  firstTokenMs: positiveInt.optional(),
  /** Longest silence between two output events of a stream. */
  idleMs: positiveInt,
  /** The one budget of a whole request, its fallbacks included: past it, it ends typed. */
  deadlineMs: positiveInt,
};

export const timeoutsSchema = z.strictObject(timeoutsShape);
const modelTimeoutsSchema = z.strictObject(timeoutsShape).partial();

const resumeShape = {
  /** Resume a stream that failed after its first byte on another worker, as a continuation. */
  enabled: z.boolean(),
  /** Resumes at most per request. */
  maxAttempts: positiveInt,
};
export const resumeSchema = z.strictObject(resumeShape);

export const modelSchema = z.strictObject({
  policy: policyNameSchema.optional(),
  /** This model's routing settings over `routing`'s (its scorer's weights and saturation). */
  routing: z.strictObject({ scorer: modelScorerSchema.optional() }).optional(),
  /**
   * The most output tokens a request to this model may ask for (`max_tokens`,
   * `max_completion_tokens`, `max_output_tokens`); more is refused with a 400. Overrides
   * `limits.maxOutputTokens`, within the engine's `max_model_len` when its worker reports one.
   */
  maxOutputTokens: positiveInt.optional(),
  timeouts: modelTimeoutsSchema.optional(),
  resume: z.strictObject(resumeShape).partial().optional(),
  /**
   * The models that answer, in order, when this one cannot (README "Fallbacks"): retries
   * exhausted on 429/5xx/connect errors/resets/timeouts, a context window exceeded, a circuit
   * open on every worker, or a stream cut that no worker of this model can resume.
   */
  fallbacks: z.array(z.string().min(1)).max(8).optional(),
  /**
   * Whether this model accepts an assistant prefill (`continue_final_message`): a stream cut on
   * it or another model may be continued on it from the text so far. Off for models whose chat
   * template rejects it (learnt from the engine's 400 as well: dispatch/prefill-memory.ts).
   */
  continuation: z.boolean().optional(),
  /**
   * What the model serves (`chat`, `embedding`, `rerank`, or a list of them): a request of
   * another kind is refused with a 400 `wrong_model_kind`. Overrides what its workers' `/v1/models`
   * declare; with neither, the model serves every kind (its engine answers what it cannot do).
   */
  kind: z
    .union([z.enum(MODEL_KINDS), z.array(z.enum(MODEL_KINDS)).min(1)])
    .transform((kind) => (Array.isArray(kind) ? [...new Set(kind)] : [kind]))
    .optional(),
});

export const configSchema = z.strictObject({
  server: z
    .strictObject({
      host: z.string().min(1).default('127.0.0.1'),
      port: z.number().int().min(0).max(65535).default(8080),
      bodyLimitBytes: positiveInt.default(8 * 1024 * 1024),
      /**
       * Longest a client may take to send a whole request, headers and body: past it the request
       * is answered 408 and its connection closed. It bounds clients that send part of a request
       * and stall (slowloris), which otherwise hold a connection forever. Answers, streams
       * included, are not bounded by it.
       */
      requestTimeoutMs: positiveInt.default(60_000),
      /** On SIGTERM, how long in-flight streams may go on before they are ended. */
      shutdownGraceMs: nonNegativeInt.default(10_000),
      /** Gateway processes sharing the port (node:cluster); 1 runs the gateway in this process. */
      processes: positiveInt.max(256).default(1),
      /**
       * Client headers passed on to workers (lower case; a trailing `*` matches a prefix). Nothing
       * else is forwarded: never the client's Authorization, cookies or hop-by-hop headers.
       */
      forwardHeaders: z
        .array(z.string().regex(/^[a-z0-9-]+\*?$/, 'a lower-case header name, optionally ending in *'))
        .default(['traceparent', 'tracestate', 'baggage']),
      /**
       * Whether API clients learn which worker served them: the `X-Sluice-Worker` header and
       * worker names in error messages (the configured id, else an opaque `worker-<n>`, never the
       * worker's host and port). Off: no header, and worker names are cut from client errors.
       * Logs, metrics and the admin API always use the real worker id.
       */
      exposeWorker: z.boolean().default(true),
    })
    .prefault({}),
  log: z
    .strictObject({
      level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
      /** pretty (coloured lines) on a terminal and json otherwise, unless chosen. */
      format: z.enum(['auto', 'json', 'pretty']).default('auto'),
    })
    .prefault({}),
  routing: z
    .strictObject({
      policy: policyNameSchema.default('scorer'),
      /** Header whose value keys consistent_hash routing. */
      hashHeader: z.string().min(1).default('x-session-id'),
      cacheAware: z
        .strictObject({
          matchThreshold: z.number().min(0).max(1).default(0.5),
          balanceAbsThreshold: nonNegativeInt.default(32),
          balanceRelThreshold: z.number().min(1).default(1.5),
          maxTreeChars: positiveInt.default(16_000_000),
        })
        .prefault({}),
      consistentHash: z.strictObject({ virtualNodes: positiveInt.default(160) }).prefault({}),
      /** The scorer policy: filters, then weighted scorers on the engines' signals (README "Scorer routing"). */
      scorer: scorerSchema,
      /**
       * 0 (the default): a batch of inputs is one request, to one worker. N: an embeddings request
       * of more than N inputs is split into parts of N, sent to the model's workers at once (each
       * part routed, retried and failed over on its own) and its answers joined in order.
       */
      batchSplitSize: nonNegativeInt.default(0),
    })
    .prefault({}),
  /** Flow control (README "Flow control"): requests wait in the gateway while a scorer-routed model's workers are all saturated. */
  flow: flowSchema,
  health: z
    .strictObject({
      intervalMs: positiveInt.default(5_000),
      timeoutMs: positiveInt.default(2_000),
      /** Consecutive failed checks that mark a worker unhealthy. */
      failureThreshold: positiveInt.default(2),
      /** Consecutive good checks that mark it healthy again. */
      successThreshold: positiveInt.default(1),
    })
    .prefault({}),
  /**
   * Engine signals: every worker's Prometheus `/metrics` read on a timer, off the request path,
   * into what it says of its queue, batch, KV cache, prefix cache and LoRA adapters
   * (src/workers/engine-signals.ts). A worker without usable metrics is read from sluice's own
   * counts; one whose reading is older than `staleMs` counts as saturated.
   */
  signals: z
    .strictObject({
      enabled: z.boolean().default(true),
      /**
       * How often each worker is read (at most one read in flight per worker). The scorer is as
       * good as its readings: at 1 s it routed no better than least_outstanding on the routing
       * benchmark, at 250 ms clearly better (README "Routing benchmark").
       */
      intervalMs: positiveInt.default(250),
      /** Longest one read may take, headers and body. */
      timeoutMs: positiveInt.default(1_000),
      /**
       * A reading older than this is stale (the worker counts as saturated); default 3 × intervalMs,
       * and at least intervalMs + timeoutMs (a read that takes its whole time does not make it stale).
       */
      staleMs: positiveInt.optional(),
      /** Most bytes of one `/metrics` body; a larger one is not read (the worker falls back to sluice's counts). */
      maxBytes: positiveInt.default(4 * 1024 * 1024),
      /**
       * Most bytes of the lines of the engine's own families (those read, after vLLM's LoRA
       * series are cut to the newest of each scheduler) kept of one `/metrics`; more is refused
       * unparsed, as a body past `maxBytes` is. They are parsed on the event loop at up to
       * 0.6 µs a byte: under the default a read held it at most 20 ms (bench/metrics-read.ts),
       * and a vLLM of 64 data-parallel engines keeps 18 KiB (src/workers/kept-lines.ts).
       */
      maxSampleBytes: positiveInt.default(64 * 1024),
      /** How long a worker without usable `/metrics` (404, not Prometheus text...) goes unasked. */
      missingRetryMs: positiveInt.default(60_000),
      /**
       * Most LoRA adapters a worker serves that only its signals named (`vllm:lora_requests_info`,
       * not its `/v1/models`); more are ignored until some expire.
       */
      maxAdapters: positiveInt.max(4096).default(256),
      /** An adapter known only from a worker's signals that no reading named for this long is no longer routed to it. */
      adapterExpiryMs: positiveInt.default(60_000),
    })
    .prefault({})
    .transform((s) => ({
      ...s,
      staleMs: s.staleMs ?? Math.max(3 * s.intervalMs, s.intervalMs + s.timeoutMs),
    }))
    .refine((s) => s.staleMs > s.intervalMs, {
      message: 'signals.staleMs must be longer than signals.intervalMs',
      path: ['staleMs'],
    }),
  breaker: z
    .strictObject({
      /** Consecutive request failures that open a worker's circuit. */
      failureThreshold: positiveInt.default(5),
      /** How long an open circuit rejects before one half-open probe is let through. */
      cooldownMs: positiveInt.default(10_000),
      /**
       * At most this share of a model's workers is ejected for that model's failures at once
       * (at least one). When every worker of a model is ejected, requests go to them anyway
       * (panic mode) rather than failing with 503.
       */
      maxEjectionPercent: z.number().min(0).max(100).default(50),
    })
    .prefault({}),
  retry: z
    .strictObject({
      /** Attempts in all (1 = no retry), each on another worker when one is left. */
      maxAttempts: positiveInt.default(3),
      /** Before a route already tried: 0.5 s, 1 s, 2 s... to 8 s, jittered (dispatch/retry-backoff.ts). */
      backoffMs: nonNegativeInt.default(500),
      maxBackoffMs: nonNegativeInt.default(8_000),
      /**
       * The longest Retry-After of an engine's 429/503 that is waited before trying that route
       * again; past it the request moves to its next model at once (or ends with the 429/503).
       */
      maxRetryAfterMs: nonNegativeInt.default(10_000),
      /**
       * Engine attempts one request makes over its whole fallback chain, every model together
       * (each model still at most `maxAttempts`); default twice `maxAttempts`. Past it the chain
       * ends with its last failure.
       */
      maxChainAttempts: positiveInt.optional(),
    })
    .transform(({ maxChainAttempts, ...r }) => ({
      ...r,
      maxChainAttempts: maxChainAttempts ?? 2 * r.maxAttempts,
    }))
    .prefault({}),
  timeouts: timeoutsSchema
    .partial()
    .transform((t) => ({
      headersMs: 30_000,
      idleMs: 60_000,
      deadlineMs: 30 * 60_000,
      ...t,
    }))
    .prefault({}),
  /**
   * Bounds on what the gateway holds of an engine's answer. Past one, the request fails with a
   * typed error (`upstream_event_too_large`, `upstream_preamble_too_large`,
   * `upstream_body_too_large`) and the upstream request is aborted.
   */
  limits: z
    .strictObject({
      /** One SSE event (a line without its end is held until this many bytes). */
      maxEventBytes: positiveInt.default(1024 * 1024),
      /** What a stream may send before its first output chunk (role chunks, comments...). */
      maxPrefaceBytes: positiveInt.default(1024 * 1024),
      /**
       * What the gateway holds of one answer: a non-streaming answer's body, and what a
       * Responses run builds (its event log and response object), streamed or not.
       */
      maxBodyBytes: positiveInt.default(64 * 1024 * 1024),
      /**
       * What all requests together may hold of answers being built (non-streaming engine
       * answers being read, Responses runs, the text kept for a continuation) past 1 MiB each:
       * past it, the request that needs more fails with a 503 `gateway_memory_full` (a stream:
       * its typed terminal event). Default: a sixteenth of the V8 heap limit (docs/SECURITY.md).
       */
      maxHeldBytes: positiveInt.optional(),
      /**
       * The most output tokens a request may ask for (`max_tokens`, `max_completion_tokens`,
       * `max_output_tokens`) unless its model sets `models.<m>.maxOutputTokens`: more is refused
       * with a 400 `max_tokens_too_large` naming the field. 128 Ki, OpenAI's largest output limit.
       */
      maxOutputTokens: positiveInt.default(128 * 1024),
      /**
       * The most inputs one batch may carry: an embeddings request's `input` items, a rerank's
       * `documents`, a score's pairs. More is refused with a 400 `too_many_inputs` (2,048 is
       * OpenAI's own bound of an embeddings request).
       */
      maxBatchInputs: positiveInt.default(2048),
    })
    .prefault({}),
  /** Mid-stream resume, off unless a model (or a request's X-Sluice-Resume header) turns it on. */
  resume: resumeSchema
    .partial()
    .transform((r) => ({ enabled: false, maxAttempts: 2, ...r }))
    .prefault({}),
  workerDefaults: workerLimitsSchema
    .partial()
    .transform((l) => ({ maxConcurrent: 256, queueSize: 4096, queueTimeoutMs: 30_000, ...l }))
    .prefault({}),
  /** Where the gateway keeps its files (the SQLite database, the embedded model). */
  dataDir: z.string().min(1).default(join(homedir(), '.sluice')),
  storage: z
    .strictObject({
      /** sqlite (embedded default), postgres (several replicas), or none (store=false only). */
      kind: z.enum(['sqlite', 'postgres', 'none']).default('sqlite'),
      /** SQLite database file; default `<dataDir>/sluice.db`. */
      path: z.string().min(1).optional(),
      /** PostgreSQL connection string, e.g. postgres://user@host:5432/db. */
      url: z.string().min(1).optional(),
      /** PostgreSQL schema to use (created when missing). */
      schema: z
        .string()
        .regex(/^[a-z_][a-z0-9_]*$/, 'a lower-case SQL identifier')
        .optional(),
      /** SQLite: how long a call waits (its turn on the storage thread and another process's lock) before failing typed, in ms. */
      busyTimeoutMs: z.number().int().min(0).max(60_000).default(5_000),
      /** PostgreSQL: how long a write keeps retrying while the server is unreachable, in ms. */
      writeRetryMs: z.number().int().min(0).max(60_000).default(4_000),
    })
    .prefault({})
    .refine((s) => s.kind !== 'postgres' || s.url !== undefined, {
      message: 'storage.url is required when storage.kind is postgres',
      path: ['url'],
    }),
  /** Background responses across processes: replica leases, orphan sweeping, following from another replica. */
  responses: z
    .strictObject({
      /** How often each gateway process renews its lease in the store. */
      heartbeatMs: positiveInt.default(2_000),
      /** A process whose lease was not renewed for this long is dead: its background responses end as failed. */
      leaseMs: positiveInt.default(10_000),
      /** How often a process looks for background responses of dead ones. */
      sweepIntervalMs: positiveInt.default(5_000),
      /** How often `GET /v1/responses/{id}?stream=true` reads the store for a response run by another process. */
      followPollMs: positiveInt.default(250),
      /** WebSocket mode of `/v1/responses` (the Open Responses `x-openresponses-websocket` extension). */
      websocket: z
        .strictObject({
          /** A connection lasts at most this long, then ends with `websocket_connection_limit_reached`. */
          maxConnectionMs: positiveInt.default(3_600_000),
          /** How often the gateway pings; a peer that has not answered the previous ping is closed. */
          pingIntervalMs: positiveInt.default(30_000),
          /** Responses of a connection kept in memory for `previous_response_id` (store: false too). */
          cachedResponses: positiveInt.default(16),
          /** Streams (`stream_id` lanes) of one connection running responses at once. */
          maxStreams: positiveInt.default(16),
          /** `response.create` messages waiting on one stream behind the one it runs. */
          maxQueuedPerStream: positiveInt.default(16),
          /**
           * Origins (`https://app.example`) whose web pages may open a connection. An upgrade
           * request with an `Origin` header (a browser's) is refused with 403 `origin_not_allowed`
           * unless its origin is listed; one without (a non-browser client) is not concerned.
           */
          allowedOrigins: z.array(origin).default([]),
          /** Connections open at once, in all; past it an upgrade is refused with 503 `websocket_capacity_reached`. */
          maxConnections: positiveInt.default(1024),
          /** Connections open at once from one client address; past it an upgrade is refused with 429 `too_many_connections`. */
          maxConnectionsPerClient: positiveInt.default(64),
        })
        .prefault({}),
    })
    .prefault({})
    .refine((r) => r.leaseMs > r.heartbeatMs, {
      message: 'responses.leaseMs must be longer than responses.heartbeatMs',
      path: ['leaseMs'],
    }),
  /** Files given in requests (`input_file` parts). */
  files: filesSchema.prefault({}),
  /** Redis, shared by several gateway replicas (redis-schema.ts). */
  redis: redisSchema,
  auth: z
    .strictObject({
      /** The admin API's own key (Authorization: Bearer); without it the admin API is open. */
      adminKey: z.string().min(16, 'the admin key must be at least 16 characters').optional(),
    })
    .prefault({}),
  discovery: z
    .strictObject({
      /** Workers from the Kubernetes API: pods matching a label selector, watched. */
      kubernetes: z
        .strictObject({
          apiServer: z.url().default('https://kubernetes.default.svc'),
          namespace: z.string().min(1),
          labelSelector: z.string().min(1),
          portAnnotation: z.string().min(1).default('sluice.io/port'),
          defaultPort: z.number().int().min(1).max(65535).optional(),
          scheme: z.enum(['http', 'https']).default('http'),
          tokenFile: z.string().min(1).optional(),
          caFile: z.string().min(1).optional(),
          insecureSkipTlsVerify: z.boolean().default(false),
        })
        .optional(),
    })
    .prefault({}),
  /** The MCP tool loop of the Responses API (`tools: [{type: "mcp", ...}]`); see README "MCP tools". */
  mcp: mcpSettingsSchema.prefault({}),
  /** OpenTelemetry tracing: spans per generation request, exported over OTLP/HTTP (JSON). */
  tracing: z
    .strictObject({
      enabled: z.boolean().default(false),
      /** The OTLP/HTTP traces endpoint (the full URL, `/v1/traces` included). */
      endpoint: z.url({ protocol: /^https?$/ }).default('http://127.0.0.1:4318/v1/traces'),
      serviceName: z.string().min(1).default('sluice'),
      /** Share of new traces sampled; a client's traceparent decides for the traces it continues. */
      sampleRatio: z.number().min(0).max(1).default(1),
      /** Headers sent with each export (an API key of the collector, ...). */
      headers: z.record(z.string().min(1), z.string()).default({}),
      /** Longest a finished span waits before it is exported in a batch. */
      batchDelayMs: positiveInt.default(5_000),
      /** Bound of one export (retries included); the final flush on shutdown waits at most 2 s. */
      exportTimeoutMs: positiveInt.default(10_000),
    })
    .prefault({}),
  workers: z.array(workerSchema).default([]),
  models: z.record(z.string().min(1), modelSchema).default({}),
});

export type SluiceConfigInput = z.input<typeof configSchema>;
export type SluiceConfig = z.output<typeof configSchema>;
export type WorkerConfig = z.output<typeof workerSchema>;
export type Timeouts = z.output<typeof timeoutsSchema>;
export type ResumeSettings = z.output<typeof resumeSchema>;
export type WorkerLimits = z.output<typeof workerLimitsSchema>;

export { filesSchema, mcpSettingsSchema } from './feature-schemas.js';
