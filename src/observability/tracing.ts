import type { IncomingHttpHeaders } from 'node:http';
import {
  type Attributes,
  type AttributeValue,
  type Context,
  defaultTextMapGetter,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import type { SluiceConfig } from '../config/schema.js';
import type { Logger } from './logger.js';
import { LoggingExporter } from './logging-exporter.js';
import type { ApiName } from './metrics.js';
import { ATTR, EVENT_FIRST_TOKEN, GEN_AI_OPERATION } from './trace-attributes.js';

export type TracingConfig = SluiceConfig['tracing'];

const VERSION = '0.1.0';
/**
 * Longest the final flush may hold up a closing gateway (less when `exportTimeoutMs` is less):
 * the exporter retries a collector that refuses connections until its timeout.
 */
const SHUTDOWN_FLUSH_MS = 2_000;

/** What a request span is started from. */
export interface RequestStart {
  api: ApiName;
  /** The route, e.g. `/v1/chat/completions`. */
  route: string;
  requestId: string;
  /** The client's headers: a `traceparent` (and `tracestate`) there is continued. */
  headers: IncomingHttpHeaders;
  /** `performance.now()` when the request was received. */
  receivedAt: number;
}

/**
 * What one attempt's routing did, filled as it goes (a plain record: the dispatcher's files write
 * it without calling back into tracing) and told to the trace once (RequestTrace.routed).
 */
export interface RoutingRecord {
  readonly policy: string;
  readonly retry: number;
  /** `performance.now()` when the attempt began to route: the routing span starts here. */
  readonly startedAt: number;
  /** How long it waited in the gateway's flow control, and in which priority class. */
  waitedMs?: number;
  priority?: string;
  /** The worker picked, out of how many candidates. */
  workerId?: string;
  candidates?: number;
  /** Why the policy chose the worker (the scorer's explanation). */
  explanation?: {
    readonly decidedBy: string;
    readonly filtered: Readonly<Record<string, number>>;
    readonly scores: readonly unknown[];
  };
}

/** The parts of an upstream attempt its span describes. */
export interface AttemptStart {
  workerId: string;
  /** The worker's base URL. */
  workerUrl: string;
  /** Upstream path, e.g. `/v1/chat/completions`. */
  path: string;
  /** The attempt's own upstream request id (`x-request-id`). */
  requestId: string;
  /** Retry index within one dispatch (0 = first try). */
  retry: number;
  rank: number;
}

interface ErrorLike {
  code?: unknown;
  message?: unknown;
}

/** `gen_ai.operation.name` of an API's requests. */
function operationOf(api: ApiName): string {
  switch (api) {
    case 'completions':
      return GEN_AI_OPERATION.TEXT_COMPLETION;
    case 'embeddings':
      return GEN_AI_OPERATION.EMBEDDINGS;
    case 'rerank':
      return GEN_AI_OPERATION.RERANK;
    case 'score':
      return GEN_AI_OPERATION.SCORE;
    case 'tokenize':
      return GEN_AI_OPERATION.TOKENIZE;
    default:
      return GEN_AI_OPERATION.CHAT;
  }
}

function codeOf(error: unknown): string {
  const code = (error as ErrorLike | null)?.code;
  return typeof code === 'string' ? code : 'internal_error';
}

function numberOf(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

function setIfDefined(attributes: Attributes, key: string, value: AttributeValue | undefined): void {
  if (value !== undefined) attributes[key] = value;
}

/** Server address and port of a worker URL, parsed once per URL. */
const endpoints = new Map<string, { address: string; port: number }>();
function endpointOf(url: string): { address: string; port: number } {
  let found = endpoints.get(url);
  if (!found) {
    const parsed = new URL(url);
    const port = parsed.port ? Number(parsed.port) : parsed.protocol === 'https:' ? 443 : 80;
    found = { address: parsed.hostname.replace(/^\[|\]$/g, ''), port };
    if (endpoints.size > 10_000) endpoints.clear();
    endpoints.set(url, found);
  }
  return found;
}

/**
 * OpenTelemetry tracing of the gateway: one tracer provider (batching, OTLP/HTTP JSON export,
 * parent-based ratio sampling) and the W3C trace-context propagator. Built only when tracing is
 * enabled; with tracing off the gateway holds no instance and its hot path does nothing.
 *
 * The provider is not registered globally: the gateway passes contexts explicitly, so no context
 * manager is needed and several gateways can live in one process.
 */
export class Tracing {
  private readonly provider: NodeTracerProvider;
  readonly tracer: Tracer;
  readonly propagator = new W3CTraceContextPropagator();
  private shutdownPromise: Promise<void> | undefined;

  constructor(
    readonly config: TracingConfig,
    private readonly log: Logger,
  ) {
    const exporter = new OTLPTraceExporter({
      url: config.endpoint,
      headers: config.headers,
      timeoutMillis: config.exportTimeoutMs,
    });
    this.provider = new NodeTracerProvider({
      resource: resourceFromAttributes({
        [ATTR_SERVICE_NAME]: config.serviceName,
        [ATTR_SERVICE_VERSION]: VERSION,
      }),
      sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sampleRatio) }),
      spanProcessors: [
        new BatchSpanProcessor(new LoggingExporter(exporter, log, config.endpoint), {
          scheduledDelayMillis: config.batchDelayMs,
          exportTimeoutMillis: config.exportTimeoutMs,
        }),
      ],
    });
    this.tracer = this.provider.getTracer('sluice', VERSION);
  }

  /** The tracing of `config`, or undefined when it is off. */
  static fromConfig(config: SluiceConfig, log: Logger): Tracing | undefined {
    if (!config.tracing.enabled) return undefined;
    const tracing = new Tracing(config.tracing, log);
    log.info(
      { endpoint: config.tracing.endpoint, sampleRatio: config.tracing.sampleRatio },
      'tracing: exporting spans over OTLP/HTTP',
    );
    return tracing;
  }

  /**
   * Starts the server span of a generation request, continuing the client's `traceparent`.
   * Undefined when the request is not sampled: nothing more is recorded for it.
   */
  startRequest(start: RequestStart): RequestTrace | undefined {
    const parent = this.propagator.extract(ROOT_CONTEXT, start.headers, defaultTextMapGetter);
    const span = this.tracer.startSpan(
      `POST ${start.route}`,
      {
        kind: SpanKind.SERVER,
        startTime: start.receivedAt,
        attributes: {
          [ATTR.HTTP_REQUEST_METHOD]: 'POST',
          [ATTR.HTTP_ROUTE]: start.route,
          [ATTR.URL_PATH]: start.route,
          [ATTR.REQUEST_ID]: start.requestId,
          [ATTR.GEN_AI_OPERATION_NAME]: operationOf(start.api),
        },
      },
      parent,
    );
    if (!span.isRecording()) {
      span.end();
      return undefined;
    }
    return new RequestTrace(this, span, start);
  }

  /** Exports what is pending and stops, waiting at most SHUTDOWN_FLUSH_MS. Idempotent. */
  shutdown(): Promise<void> {
    this.shutdownPromise ??= (async () => {
      let timer: NodeJS.Timeout | undefined;
      const waitMs = Math.min(this.config.exportTimeoutMs, SHUTDOWN_FLUSH_MS);
      const bound = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), waitMs);
        timer.unref();
      });
      try {
        const result = await Promise.race([this.provider.shutdown(), bound]);
        if (result === 'timeout')
          this.log.warn({ waitMs }, 'tracing: the final export did not finish; pending spans are dropped');
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'tracing: the final export failed');
      } finally {
        clearTimeout(timer);
      }
    })();
    return this.shutdownPromise;
  }
}

/**
 * The spans of one client request: its server span, and under it a routing span and a client
 * span per upstream attempt. Every method is called a bounded number of times per request (never
 * per token); times are passed as `performance.now()` values, as the server span's start is.
 */
export class RequestTrace {
  private readonly parent: Context;
  /** GenAI request attributes, copied onto each attempt span. */
  private readonly requestAttributes: Attributes;
  private attempts = 0;
  private errorCode: string | undefined;
  private ended = false;

  constructor(
    private readonly tracing: Tracing,
    readonly span: Span,
    private readonly start: RequestStart,
  ) {
    this.parent = trace.setSpan(ROOT_CONTEXT, span);
    this.requestAttributes = {
      [ATTR.GEN_AI_OPERATION_NAME]: operationOf(start.api),
    };
  }

  get traceId(): string {
    return this.span.spanContext().traceId;
  }

  /** The validated request: model and sampling parameters (from the client's own JSON). */
  request(model: string, body: Record<string, unknown>): void {
    const a = this.requestAttributes;
    a[ATTR.GEN_AI_REQUEST_MODEL] = model;
    setIfDefined(
      a,
      ATTR.GEN_AI_REQUEST_MAX_TOKENS,
      numberOf(body.max_tokens) ?? numberOf(body.max_completion_tokens) ?? numberOf(body.max_output_tokens),
    );
    setIfDefined(a, ATTR.GEN_AI_REQUEST_TEMPERATURE, numberOf(body.temperature));
    setIfDefined(a, ATTR.GEN_AI_REQUEST_TOP_P, numberOf(body.top_p));
    a[ATTR.GEN_AI_REQUEST_STREAM] = body.stream === true;
    this.span.setAttributes(a);
  }

  /** What the engine answered: response id and model, finish reasons, usage (any of them may be absent). */
  response(json: Record<string, unknown>): void {
    const attributes: Attributes = {};
    if (typeof json.id === 'string') attributes[ATTR.GEN_AI_RESPONSE_ID] = json.id;
    if (typeof json.model === 'string') attributes[ATTR.GEN_AI_RESPONSE_MODEL] = json.model;
    if (Array.isArray(json.choices)) {
      const reasons = (json.choices as { finish_reason?: unknown }[])
        .map((c) => c?.finish_reason)
        .filter((r): r is string => typeof r === 'string');
      if (reasons.length > 0) attributes[ATTR.GEN_AI_RESPONSE_FINISH_REASONS] = reasons;
    }
    this.span.setAttributes(attributes);
    this.usage(json.usage);
  }

  /** Token usage, in chat-completions (`prompt_tokens`) or Responses (`input_tokens`) shape. */
  usage(usage: unknown): void {
    if (typeof usage !== 'object' || usage === null) return;
    const u = usage as Record<string, unknown>;
    const input = numberOf(u.prompt_tokens) ?? numberOf(u.input_tokens);
    const output = numberOf(u.completion_tokens) ?? numberOf(u.output_tokens);
    if (input !== undefined) this.span.setAttribute(ATTR.GEN_AI_USAGE_INPUT_TOKENS, input);
    if (output !== undefined) this.span.setAttribute(ATTR.GEN_AI_USAGE_OUTPUT_TOKENS, output);
  }

  /** The stable error code of a failure ended otherwise than through `end`'s fields. */
  failed(code: string): void {
    this.errorCode = code;
  }

  /** One event when the first bytes of the answer went to the client. */
  firstToken(at = performance.now()): void {
    this.span.addEvent(
      EVENT_FIRST_TOKEN,
      { [ATTR.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]: (at - this.start.receivedAt) / 1000 },
      at,
    );
  }

  /**
   * The routing span of one attempt, from its record (made when the attempt began to route and
   * filled as it went: the flow wait, the pick and why), told in one call once it is done; then
   * the attempt's client span, under the request's.
   */
  routed(record: RoutingRecord, attempt: AttemptStart): AttemptTrace {
    this.routingSpan(record).end();
    return this.startAttempt(attempt);
  }

  /** The routing span of an attempt that found no worker: ERROR with the stable code. */
  routingFailed(record: RoutingRecord, error: unknown): void {
    const span = this.routingSpan(record);
    const code = codeOf(error);
    span.setAttribute(ATTR.ERROR_TYPE, code);
    span.setStatus({ code: SpanStatusCode.ERROR, message: code });
    span.end();
  }

  private routingSpan(record: RoutingRecord): Span {
    const attributes: Attributes = {
      [ATTR.ROUTING_POLICY]: record.policy,
      [ATTR.ATTEMPT_RETRY]: record.retry,
    };
    if (record.waitedMs !== undefined) {
      attributes[ATTR.FLOW_WAIT_MS] = Math.round(record.waitedMs * 10) / 10;
      attributes[ATTR.FLOW_PRIORITY] = record.priority ?? '';
    }
    if (record.workerId !== undefined) {
      attributes[ATTR.WORKER_ID] = record.workerId;
      attributes[ATTR.ROUTING_CANDIDATES] = record.candidates ?? 0;
    }
    const explanation = record.explanation;
    if (explanation) {
      attributes[ATTR.ROUTING_DECIDED_BY] = explanation.decidedBy;
      attributes[ATTR.ROUTING_SCORES] = JSON.stringify(explanation.scores);
      attributes[ATTR.ROUTING_FILTERED_SATURATED] = explanation.filtered.saturated ?? 0;
      attributes[ATTR.ROUTING_FILTERED_LORA] = explanation.filtered.lora ?? 0;
    }
    return this.tracing.tracer.startSpan(
      'routing',
      { kind: SpanKind.INTERNAL, attributes, startTime: record.startedAt },
      this.parent,
    );
  }

  /** A client span for one upstream attempt (first try, retry, failover or resume). */
  private startAttempt(attempt: AttemptStart): AttemptTrace {
    this.attempts++;
    const { address, port } = endpointOf(attempt.workerUrl);
    const model = this.requestAttributes[ATTR.GEN_AI_REQUEST_MODEL];
    const operation = this.requestAttributes[ATTR.GEN_AI_OPERATION_NAME];
    const span = this.tracing.tracer.startSpan(
      typeof model === 'string' ? `${operation} ${model}` : String(operation),
      {
        kind: SpanKind.CLIENT,
        attributes: {
          ...this.requestAttributes,
          [ATTR.HTTP_REQUEST_METHOD]: 'POST',
          [ATTR.URL_FULL]: attempt.workerUrl + attempt.path,
          [ATTR.SERVER_ADDRESS]: address,
          [ATTR.SERVER_PORT]: port,
          [ATTR.WORKER_ID]: attempt.workerId,
          [ATTR.UPSTREAM_REQUEST_ID]: attempt.requestId,
          [ATTR.ATTEMPT_NUMBER]: this.attempts,
          [ATTR.ATTEMPT_RETRY]: attempt.retry,
          [ATTR.DATA_PARALLEL_RANK]: attempt.rank,
        },
      },
      this.parent,
    );
    return new AttemptTrace(this.tracing, span);
  }

  /**
   * Ends the server span with the request's terminal outcome: `completed` is OK; `failed` (a
   * stream that broke after its first byte) and errors with a 5xx status are ERROR with their
   * stable code; `client_gone` and 4xx answers leave the status unset (not the server's fault).
   */
  end(status: number, outcome: string, fields: Record<string, unknown> = {}): void {
    if (this.ended) return;
    this.ended = true;
    const span = this.span;
    const code = typeof fields.code === 'string' ? fields.code : this.errorCode;
    const attributes: Attributes = {
      [ATTR.HTTP_RESPONSE_STATUS_CODE]: status,
      [ATTR.OUTCOME]: outcome,
      [ATTR.ATTEMPTS]: this.attempts,
    };
    if (typeof fields.resumes === 'number') attributes[ATTR.RESUMES] = fields.resumes;
    if (typeof fields.finishReason === 'string')
      attributes[ATTR.GEN_AI_RESPONSE_FINISH_REASONS] = [fields.finishReason];
    if (code !== undefined) attributes[ATTR.ERROR_TYPE] = code;
    span.setAttributes(attributes);
    if (fields.usage !== undefined) this.usage(fields.usage);
    if (outcome === 'failed' || status >= 500) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: code ?? outcome });
    } else if (outcome !== 'client_gone' && outcome !== 'error' && outcome !== 'cancelled') {
      span.setStatus({ code: SpanStatusCode.OK });
    }
    span.end(performance.now());
  }
}

/** One upstream attempt's client span; its context goes to the worker as `traceparent`. */
export class AttemptTrace {
  private ended = false;

  constructor(
    private readonly tracing: Tracing,
    private readonly span: Span,
  ) {}

  /** Writes `traceparent` (and `tracestate`) for this attempt, replacing any the client sent. */
  inject(headers: Record<string, string>): void {
    delete headers.traceparent;
    delete headers.tracestate;
    this.tracing.propagator.inject(trace.setSpan(ROOT_CONTEXT, this.span), headers, defaultTextMapSetter);
  }

  /** The engine's response status. */
  responded(status: number): void {
    this.span.setAttribute(ATTR.HTTP_RESPONSE_STATUS_CODE, status);
  }

  /** The first output chunk of this attempt's stream arrived. */
  firstToken(): void {
    this.span.addEvent(EVENT_FIRST_TOKEN);
  }

  /** Ends the span: OK on success, ERROR with the stable code otherwise (`client_gone` unset). */
  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    if (error === undefined) {
      this.span.setAttribute(ATTR.OUTCOME, 'completed');
      this.span.setStatus({ code: SpanStatusCode.OK });
    } else {
      const code = codeOf(error);
      this.span.setAttributes({ [ATTR.ERROR_TYPE]: code, [ATTR.OUTCOME]: code });
      if (code !== 'client_disconnected')
        this.span.setStatus({
          code: SpanStatusCode.ERROR,
          message:
            typeof (error as ErrorLike).message === 'string' ? String((error as ErrorLike).message) : code,
        });
    }
    this.span.end();
  }
}
