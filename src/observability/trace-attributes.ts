/**
 * The span attribute names the gateway writes, in one place. The GenAI names follow the
 * OpenTelemetry GenAI semantic conventions (the `@opentelemetry/semantic-conventions/incubating`
 * entry point has them, marked deprecated there since they moved to their own repository, so they
 * are written out here); the HTTP, server and error names are the stable ones.
 */
export const ATTR = {
  // GenAI
  GEN_AI_OPERATION_NAME: 'gen_ai.operation.name',
  GEN_AI_REQUEST_MODEL: 'gen_ai.request.model',
  GEN_AI_REQUEST_MAX_TOKENS: 'gen_ai.request.max_tokens',
  GEN_AI_REQUEST_TEMPERATURE: 'gen_ai.request.temperature',
  GEN_AI_REQUEST_TOP_P: 'gen_ai.request.top_p',
  GEN_AI_REQUEST_STREAM: 'gen_ai.request.stream',
  GEN_AI_RESPONSE_MODEL: 'gen_ai.response.model',
  GEN_AI_RESPONSE_ID: 'gen_ai.response.id',
  GEN_AI_RESPONSE_FINISH_REASONS: 'gen_ai.response.finish_reasons',
  GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: 'gen_ai.response.time_to_first_chunk',
  GEN_AI_USAGE_INPUT_TOKENS: 'gen_ai.usage.input_tokens',
  GEN_AI_USAGE_OUTPUT_TOKENS: 'gen_ai.usage.output_tokens',
  // HTTP, server, error (stable)
  HTTP_REQUEST_METHOD: 'http.request.method',
  HTTP_RESPONSE_STATUS_CODE: 'http.response.status_code',
  HTTP_ROUTE: 'http.route',
  URL_PATH: 'url.path',
  URL_FULL: 'url.full',
  SERVER_ADDRESS: 'server.address',
  SERVER_PORT: 'server.port',
  ERROR_TYPE: 'error.type',
  // The gateway's own
  REQUEST_ID: 'sluice.request_id',
  OUTCOME: 'sluice.outcome',
  ATTEMPTS: 'sluice.attempts',
  RESUMES: 'sluice.resumes',
  ROUTING_POLICY: 'sluice.routing.policy',
  ROUTING_CANDIDATES: 'sluice.routing.candidates',
  /** The scorer that set the winner apart (scorer policy), `only_candidate` or `random_tie`. */
  ROUTING_DECIDED_BY: 'sluice.routing.decided_by',
  /** The best candidates' weighted scores, winner first, as JSON `[{id, total, by: {scorer: score}}]`. */
  ROUTING_SCORES: 'sluice.routing.scores',
  /** Candidates left out as saturated, and for want of a LoRA adapter slot. */
  ROUTING_FILTERED_SATURATED: 'sluice.routing.filtered.saturated',
  ROUTING_FILTERED_LORA: 'sluice.routing.filtered.lora',
  /** Time waited in the gateway's flow control before the pick (ms), and the request's class and tenant. */
  FLOW_WAIT_MS: 'sluice.flow.wait_ms',
  FLOW_PRIORITY: 'sluice.flow.priority',
  WORKER_ID: 'sluice.worker.id',
  UPSTREAM_REQUEST_ID: 'sluice.upstream.request_id',
  ATTEMPT_NUMBER: 'sluice.attempt.number',
  ATTEMPT_RETRY: 'sluice.attempt.retry',
  DATA_PARALLEL_RANK: 'sluice.data_parallel.rank',
} as const;

/** `gen_ai.operation.name` values. */
export const GEN_AI_OPERATION = {
  CHAT: 'chat',
  TEXT_COMPLETION: 'text_completion',
  EMBEDDINGS: 'embeddings',
  // Not (yet) in the GenAI conventions: the API's own name.
  RERANK: 'rerank',
  SCORE: 'score',
  TOKENIZE: 'tokenize',
} as const;

/** Span event names. */
export const EVENT_FIRST_TOKEN = 'first_token';
