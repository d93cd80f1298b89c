import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * An engine that lies, stalls and floods: a raw node:http upstream for the hostile-engine suite.
 * It imitates the ways real OpenAI-compatible servers (vLLM, SGLang, llama.cpp, proxies in front
 * of them) misbehave that the mock worker's polite fault injection does not reach:
 *
 * - `finish:<json>`: a normal start, 3 tokens, then a chunk whose `finish_reason` is the given
 *   JSON value (vLLM's `"abort"`/`"error"`, a number, an object), then `[DONE]`. Non-streaming:
 *   the same finish in a JSON answer.
 * - `finish_now:<json>`: the same without any token.
 * - `keepalive:<comment|empty_choices|role|usage>:<N>`: N tokens, then only keep-alives every
 *   20 ms, never a finish (a hung scheduler behind a live HTTP layer).
 * - `endless_line:<N>`: N tokens, then `data: {"x":"aaaa…` that never ends its line.
 * - `fat_role`: role-only chunks padded with 64 KiB each, every 2 ms, never a token.
 * - `huge_body:<MiB>`: a non-streaming answer of that many MiB.
 * - `status:<code>[:<retry-after>]`: that HTTP status with an OpenAI-shaped error body (none for
 *   204/304), and the Retry-After header when given.
 * - `usage_reset`: a usage-only chunk (`choices: []` with `usage`), then the connection is reset
 *   (an engine that reports its prompt's usage first, then dies before any token).
 * - `endless[:<bytes>[:<per ms>]]`: a correct start, then tokens of that many bytes (default
 *   4 KiB), at most that many a millisecond (default 16) and never faster than the gateway reads,
 *   never a finish (an engine that honours `max_tokens: 2^53-1`); non-streaming: a JSON body
 *   that never ends.
 * - `trickle[:<ms>[:<pad>]]`: a correct answer (a JSON body, or the stream of `ok`) whose content is
 *   padded with `pad` spaces (default 4096), written one byte every `ms` ms (default 20): headers
 *   at once, the whole answer only minutes later (an engine, or a proxy, at 1 byte a tick).
 * - `linger`: a correct stream of 5 tokens and `[DONE]`, after which the response never ends:
 *   a comment every 100 ms (a proxy that holds the connection open past the terminal event).
 * - `ok`: a correct stream of 5 tokens (or a correct JSON answer).
 *
 * The mode is the engine's (`mode`), or a request's `x-evil` header.
 */
export interface EvilEngine {
  readonly url: string;
  mode: string;
  readonly stats: {
    requests: number;
    /** Requests whose connection closed before the engine ended its answer. */
    aborted: number;
    /** Answers still being written. */
    open: number;
    /** Bytes of each answer the socket took (handed to the kernel), per request, in order. */
    bytes: number[];
    requestIds: string[];
  };
  close(): Promise<void>;
}

const MODEL = 'evil-model';

function chunk(delta: Record<string, unknown>, finish: unknown = null, extra = {}): string {
  return `data: ${JSON.stringify({
    id: 'chatcmpl-evil',
    object: 'chat.completion.chunk',
    created: 1,
    model: MODEL,
    choices: [{ index: 0, delta, finish_reason: finish }],
    ...extra,
  })}\n\n`;
}

function completion(content: string, finish: unknown): string {
  return JSON.stringify({
    id: 'chatcmpl-evil',
    object: 'chat.completion',
    created: 1,
    model: MODEL,
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: finish }],
    usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 },
  });
}

export async function startEvilEngine(mode = 'ok'): Promise<EvilEngine> {
  const stats: EvilEngine['stats'] = { requests: 0, aborted: 0, open: 0, bytes: [], requestIds: [] };
  const timers = new Set<NodeJS.Timeout>();
  const engine = { mode } as { mode: string };

  const server = createServer((req, res) => {
    if (req.method === 'GET' && (req.url === '/health' || req.url === '/v1/models')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model' }] }));
      return;
    }
    // No engine metrics: the gateway's read of them is not one of the requests counted here.
    if (req.method === 'GET' && req.url === '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('Not Found');
      return;
    }
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (piece: string) => {
      body += piece;
    });
    req.on('end', () => answer(req, res, body));
  });

  function answer(req: IncomingMessage, res: ServerResponse, text: string): void {
    const index = stats.requests++;
    stats.bytes.push(0);
    stats.requestIds.push(String(req.headers['x-request-id'] ?? ''));
    stats.open++;
    let ended = false;
    const stop = () => {
      if (ended) return;
      ended = true;
      stats.open--;
    };
    res.on('close', () => {
      if (!ended) stats.aborted++;
      stop();
    });
    // Bytes are counted once the socket took them (the write's callback: handed to the kernel),
    // not when queued here: what the gateway read, give or take the kernel's buffers.
    const accepted = (length: number) => (err?: Error | null) => {
      if (!err) stats.bytes[index]! += length;
    };
    const write = (data: string | Buffer): boolean => {
      if (res.destroyed) return false;
      return res.write(data, accepted(Buffer.byteLength(data)));
    };
    const end = (data?: string) => {
      stop();
      if (data === undefined) res.end();
      else res.end(data, accepted(Buffer.byteLength(data)));
    };
    // A flood honours backpressure, as a real server's socket does: while the gateway does not
    // read, nothing more is queued here (a tick is skipped until the response drains).
    const every = (ms: number, tick: () => boolean | undefined) => {
      const timer = setInterval(() => {
        if (res.writableNeedDrain) return;
        if (res.destroyed || tick() === false) {
          clearInterval(timer);
          timers.delete(timer);
        }
      }, ms);
      timers.add(timer);
    };
    const header = req.headers['x-evil'];
    const spec = typeof header === 'string' ? header : engine.mode;
    const [name, arg1, arg2] = spec.split(':');
    const stream = (JSON.parse(text || '{}') as { stream?: boolean }).stream === true;
    const sse = () => res.writeHead(200, { 'content-type': 'text/event-stream' });
    const tokens = (n: number) => {
      write(chunk({ role: 'assistant', content: '' }));
      for (let i = 0; i < n; i++) write(chunk({ content: `t${i} ` }));
    };

    switch (name) {
      case 'finish':
      case 'finish_now': {
        const finish: unknown = JSON.parse(spec.slice(name.length + 1));
        if (!stream) {
          res.writeHead(200, { 'content-type': 'application/json' });
          end(completion('t0 t1 t2', finish));
          return;
        }
        sse();
        tokens(name === 'finish' ? 3 : 0);
        write(chunk({}, finish));
        end('data: [DONE]\n\n');
        return;
      }
      case 'keepalive': {
        sse();
        tokens(Number(arg2 ?? 0));
        const beat =
          arg1 === 'comment'
            ? ': keepalive\n\n'
            : arg1 === 'empty_choices'
              ? `data: ${JSON.stringify({ id: 'chatcmpl-evil', object: 'chat.completion.chunk', model: MODEL, choices: [] })}\n\n`
              : arg1 === 'usage'
                ? `data: ${JSON.stringify({ id: 'chatcmpl-evil', object: 'chat.completion.chunk', model: MODEL, choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })}\n\n`
                : chunk({ role: 'assistant' });
        every(20, () => write(beat) || undefined);
        return;
      }
      case 'endless_line': {
        sse();
        tokens(Number(arg1 ?? 0));
        write('data: {"x":"');
        const piece = 'a'.repeat(16 * 1024);
        every(2, () => write(piece) || undefined);
        return;
      }
      case 'fat_role': {
        sse();
        const fat = chunk({ role: 'assistant' }, null, { padding: 'p'.repeat(64 * 1024) });
        every(2, () => write(fat) || undefined);
        return;
      }
      case 'huge_body': {
        res.writeHead(200, { 'content-type': 'application/json' });
        let left = Number(arg1 ?? 8) * 1024 * 1024;
        write('{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"');
        const piece = 'b'.repeat(64 * 1024);
        every(1, () => {
          if (left <= 0) {
            end('"}}]}');
            return false;
          }
          left -= piece.length;
          write(piece);
          return undefined;
        });
        return;
      }
      case 'usage_reset': {
        sse();
        write(
          `data: ${JSON.stringify({ id: 'chatcmpl-evil', object: 'chat.completion.chunk', model: MODEL, choices: [], usage: { prompt_tokens: 3, completion_tokens: 0, total_tokens: 3 } })}\n\n`,
        );
        setTimeout(() => res.destroy(), 20);
        return;
      }
      case 'endless': {
        const piece = 'e'.repeat(Number(arg1 ?? 4096));
        let token = piece;
        if (stream) {
          sse();
          write(chunk({ role: 'assistant', content: '' }));
          token = chunk({ content: piece });
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          write('{"choices":[{"index":0,"message":{"role":"assistant","content":"');
        }
        // As fast as the gateway reads, never faster: what the engine buffers stays small.
        every(1, () => {
          const perTick = Number(arg2 ?? 16);
          for (let i = 0; i < perTick && !res.writableNeedDrain; i++) write(token);
          return undefined;
        });
        return;
      }
      case 'trickle': {
        const pad = ' '.repeat(Number(arg2 ?? 4096));
        let rest: string;
        if (stream) {
          sse();
          rest = `${chunk({ role: 'assistant', content: '' })}${chunk({ content: `t0${pad}` })}${chunk({}, 'stop')}data: [DONE]\n\n`;
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          rest = completion(`t0${pad}`, 'stop');
        }
        every(Number(arg1 ?? 20), () => {
          if (rest.length <= 1) {
            end(rest);
            return false;
          }
          write(rest[0]!);
          rest = rest.slice(1);
          return undefined;
        });
        return;
      }
      case 'linger': {
        sse();
        tokens(5);
        write(chunk({}, 'stop'));
        write('data: [DONE]\n\n');
        every(100, () => write(': still here\n\n') || undefined);
        return;
      }
      case 'status': {
        const status = Number(arg1);
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        if (arg2 !== undefined) headers['retry-after'] = arg2;
        res.writeHead(status, headers);
        if (status === 204 || status === 304) end();
        else end(JSON.stringify({ error: { message: `evil status ${status}`, type: 'evil', code: status } }));
        return;
      }
      default: {
        if (!stream) {
          res.writeHead(200, { 'content-type': 'application/json' });
          end(completion('t0 t1 t2 t3 t4', 'stop'));
          return;
        }
        sse();
        tokens(5);
        write(chunk({}, 'stop'));
        end('data: [DONE]\n\n');
      }
    }
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get mode() {
      return engine.mode;
    },
    set mode(value: string) {
      engine.mode = value;
    },
    stats,
    async close() {
      for (const timer of timers) clearInterval(timer);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export const EVIL_MODEL = MODEL;
