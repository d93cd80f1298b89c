import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A small OpenAI-compatible engine whose `/metrics` answers what a test sets: Prometheus text
 * (captured-looking vLLM, SGLang or llama.cpp output), a status, another content type, nothing
 * at all (it hangs), or an endless body (it floods). Its chat completions answer at once, or
 * wait while `holdChats` is set.
 */
export type MetricsAnswer =
  | { kind: 'text'; body: string; contentType?: string }
  | { kind: 'status'; status: number }
  | { kind: 'hang' }
  | { kind: 'flood'; line: string };

export interface MetricsEngine {
  readonly url: string;
  metrics: MetricsAnswer;
  /** While set, chat completions wait until it is cleared. */
  holdChats: boolean;
  readonly stats: {
    /** `/metrics` requests received. */
    metricsRequests: number;
    /** `/metrics` answers not ended yet (hanging or flooding). */
    metricsOpen: number;
    /** Bytes of flood the sockets took. */
    floodBytes: number;
    /** Chat completions answered. */
    chats: number;
    /** The `x-request-id` of each chat completion received, in order of arrival. */
    requestIds: string[];
  };
  close(): Promise<void>;
}

export const ENGINE_MODEL = 'signals-model';

function chatAnswer(): string {
  return JSON.stringify({
    id: 'chatcmpl-signals',
    object: 'chat.completion',
    created: 1,
    model: ENGINE_MODEL,
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });
}

/** What its `/v1/models` lists: by default ENGINE_MODEL alone (`parent` names an adapter's base model). */
export interface EngineModels {
  /** Other fields of a card (`root`, `max_model_len`...) are listed as they are. */
  models?: ({ id: string; parent?: string | null } & Record<string, unknown>)[];
}

export async function startMetricsEngine(
  metrics: MetricsAnswer,
  options: EngineModels = {},
): Promise<MetricsEngine> {
  const sockets = new Set<Socket>();
  const held = new Set<() => void>();
  const stats: MetricsEngine['stats'] = {
    metricsRequests: 0,
    metricsOpen: 0,
    floodBytes: 0,
    chats: 0,
    requestIds: [],
  };
  const listed = (options.models ?? [{ id: ENGINE_MODEL }]).map((m) => ({ object: 'model', ...m }));
  let holdChats = false;

  const flood = (res: ServerResponse, line: string) => {
    const chunk = line.repeat(Math.max(1, Math.floor(65_536 / line.length)));
    const write = () => {
      while (!res.destroyed) {
        stats.floodBytes += Buffer.byteLength(chunk);
        if (!res.write(chunk)) {
          res.once('drain', write);
          return;
        }
      }
    };
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
    write();
  };

  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/health') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      return;
    }
    if (req.method === 'GET' && path === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: listed }));
      return;
    }
    if (req.method === 'GET' && path === '/metrics') {
      stats.metricsRequests++;
      stats.metricsOpen++;
      res.on('close', () => stats.metricsOpen--);
      const answer = engine.metrics;
      if (answer.kind === 'text') {
        res.writeHead(200, {
          'content-type': answer.contentType ?? 'text/plain; version=0.0.4; charset=utf-8',
        });
        res.end(answer.body);
      } else if (answer.kind === 'status') {
        res.writeHead(answer.status, { 'content-type': 'text/plain' }).end('Not Found');
      } else if (answer.kind === 'flood') {
        flood(res, answer.line);
      }
      // hang: no answer, ever.
      return;
    }
    if (req.method === 'POST' && path === '/v1/chat/completions') {
      stats.requestIds.push(String(req.headers['x-request-id'] ?? ''));
      req.resume();
      req.on('end', () => {
        const answer = () => {
          stats.chats++;
          res.writeHead(200, { 'content-type': 'application/json' }).end(chatAnswer());
        };
        if (!engine.holdChats) return answer();
        held.add(answer);
      });
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  const engine: MetricsEngine = {
    url: `http://127.0.0.1:${port}`,
    metrics,
    get holdChats() {
      return holdChats;
    },
    set holdChats(value: boolean) {
      holdChats = value;
      if (!value) {
        for (const answer of held) answer();
        held.clear();
      }
    },
    stats,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
  return engine;
}

/** What a vLLM V1 engine with two data-parallel engines and LoRA answers (abridged, its shape kept). */
export const VLLM_METRICS = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12183.0
python_gc_objects_collected_total{generation="1"} 1482.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12000.0
vllm:prefix_cache_queries_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8000.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7331e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 9000.0
vllm:prefix_cache_hits_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1000.0
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.7331e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora,chat-lora",waiting_lora_adapters="summ-lora"} 1.7332e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.7330e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.005",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.917
`;

/** SGLang's `/metrics` (--enable-metrics), abridged. */
export const SGLANG_METRICS = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="Qwen/Qwen2.5-7B-Instruct"} 7.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="Qwen/Qwen2.5-7B-Instruct"} 2.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.62
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.41
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="Qwen/Qwen2.5-7B-Instruct"} 812.5
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 8000.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="Qwen/Qwen2.5-7B-Instruct"} 3000.0
sglang:cached_tokens_total{cache_source="host",model_name="Qwen/Qwen2.5-7B-Instruct"} 280.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="Qwen/Qwen2.5-7B-Instruct"} 235.1
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="Qwen/Qwen2.5-7B-Instruct"} 120.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="Qwen/Qwen2.5-7B-Instruct"} 2000.0
sglang:time_to_first_token_seconds_count{model_name="Qwen/Qwen2.5-7B-Instruct"} 2000.0
`;

/** llama.cpp's llama-server --metrics, as recent builds write it (no KV-cache gauge). */
export const LLAMACPP_METRICS = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 29.03
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 3512
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 237.151
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 97.8
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 6
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 2.71
`;
