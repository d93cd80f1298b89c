import type { IncomingMessage, ServerResponse } from 'node:http';
import { InternalError } from '../errors/http-errors.js';
import { PayloadTooLarge } from '../errors/request-errors.js';
import type { Logger } from '../observability/logger.js';
import type { ApiHandler, ApiReply, ApiRequest } from '../pipeline/exchange.js';
import { writeHead } from '../pipeline/response-head.js';
import { answerError } from './error-handler.js';
import { parseJsonBody } from './json-body.js';
import { requestId } from './request-id.js';

/**
 * A reply written straight to node:http's response, with what the routes use of a fastify
 * reply (see ApiReply). A whole answer goes out in one write with its Content-Length. A send
 * whose headers node:http refuses never throws: the answer is dropped with its headers and the
 * refusal answered as the route answers errors (`unwritable`: a 500, logged), or, should that
 * fail too, as a bare 500.
 */
class RawReply implements ApiReply {
  private status = 200;
  private headers: Record<string, string> = {};
  private hijacked = false;
  /** The answer to an unwritable send is being sent. */
  private recovering = false;

  constructor(
    readonly raw: ServerResponse,
    private readonly receivedAt: number,
    private readonly unwritable: (err: Error) => void,
  ) {}

  get sent(): boolean {
    return this.hijacked || this.raw.writableEnded;
  }

  get elapsedTime(): number {
    return performance.now() - this.receivedAt;
  }

  code(status: number): this {
    this.status = status;
    return this;
  }

  header(name: string, value: string): this {
    this.headers[name.toLowerCase()] = value;
    return this;
  }

  send(payload: Buffer | object): this {
    let body: Buffer | string;
    if (Buffer.isBuffer(payload)) {
      body = payload;
      this.headers['content-type'] ??= 'application/octet-stream';
    } else {
      body = JSON.stringify(payload);
      this.headers['content-type'] ??= 'application/json; charset=utf-8';
    }
    this.headers['content-length'] = String(Buffer.byteLength(body));
    // Headers set on the raw response before (the rate-limit ones) are kept: writeHead merges.
    const refused = writeHead(this.raw, this.status, this.headers);
    if (refused === undefined) {
      this.raw.end(body);
      return this;
    }
    this.headers = {};
    if (!this.recovering) {
      this.recovering = true;
      this.status = 500;
      this.unwritable(refused);
    }
    if (!this.raw.headersSent) this.sendBare500();
    return this;
  }

  /** The last resort: a 500 with no header but its type and length. */
  private sendBare500(): void {
    const body = JSON.stringify(new InternalError().toBody());
    for (const name of this.raw.getHeaderNames()) this.raw.removeHeader(name);
    if (writeHead(this.raw, 500, BARE_HEADERS(body)) === undefined) this.raw.end(body);
    else this.raw.destroy();
  }

  hijack(): this {
    this.hijacked = true;
    return this;
  }
}

const BARE_HEADERS = (body: string) => ({
  'content-type': 'application/json; charset=utf-8',
  'content-length': String(Buffer.byteLength(body)),
});

/** `application/json`, with or without parameters (`; charset=utf-8`), as fastify's parser matches it. */
function isJson(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const type = contentType.length === 16 ? contentType : contentType.split(';', 1)[0]!.trim();
  return type.toLowerCase() === 'application/json';
}

/** How a route answers an error, in its API's shape (bad JSON included). */
export type ErrorAnswer = (
  err: unknown,
  request: { id: string; method: string; route: string },
  reply: ApiReply,
) => void;

export interface RawRoute {
  handle: ApiHandler;
  /** The route's error answer; OpenAI's shape (answerError) when none. */
  answerError?: ErrorAnswer | undefined;
}

export interface RawJsonRouteOptions {
  routes: ReadonlyMap<string, RawRoute>;
  bodyLimit: number;
  log: Logger;
  /** While true (a drain), every request goes to fastify, which answers 503. */
  draining: () => boolean;
}

/**
 * The generation routes without the web framework: a handler of node:http requests that takes
 * `POST` of exactly a generation path (chat/completions, completions, Anthropic's messages) with a JSON body of a known, non-zero length within the
 * limit (what every SDK sends), reads and parses the body, and runs the route's handler on it;
 * it returns false for everything else, which fastify then serves with the very same handlers.
 *
 * Written by hand because the framework's own per-request machinery (routing, hooks, request and
 * reply objects, the content-type parser, `reply.send`) measured at 1.2-1.3× the CPU of a bare
 * node:http relay (`npm run bench`, the fastify floor), more than the whole budget a gateway has
 * over the bare relay on this path. Errors are answered as fastify's error handler answers them
 * (answerError), bodies parsed as its JSON parser does (parseJsonBody).
 */
export function rawJsonRoute(
  options: RawJsonRouteOptions,
): (req: IncomingMessage, res: ServerResponse) => boolean {
  const { routes, bodyLimit, log } = options;
  const openAiAnswer: ErrorAnswer = (err, request, reply) => answerError(err, request, reply, log, bodyLimit);
  return (req, res) => {
    if (req.method !== 'POST') return false;
    const route = req.url === undefined ? undefined : routes.get(req.url);
    if (route === undefined || options.draining()) return false;
    const headers = req.headers;
    if (!isJson(headers['content-type'])) return false;
    // A body in a content coding (gzip, ...) is fastify's to refuse (415), with the same hook as every route.
    if (headers['content-encoding'] !== undefined) return false;
    // An empty body, a length that is not a number or one over the limit: fastify's answer.
    const declared = headers['content-length'];
    if (declared !== undefined) {
      const length = Number(declared);
      if (!(length > 0 && length <= bodyLimit)) return false;
    } else if (headers['transfer-encoding'] === undefined) return false;
    const receivedAt = performance.now();
    const id = requestId(headers['x-request-id']);
    const path = req.url!;
    const answer = route.answerError ?? openAiAnswer;
    // An answer that cannot be written is answered as the route answers errors; nothing here throws.
    const reply = new RawReply(res, receivedAt, (err) => fail(err));
    const fail = (err: unknown) => {
      try {
        answer(err, { id, method: 'POST', route: path }, reply);
      } catch (thrown) {
        log.error({ err: thrown, requestId: id }, 'error answer failed');
        if (!res.writableEnded) res.destroy();
      }
    };
    const parts: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > bodyLimit) {
        req.off('data', onData);
        req.off('end', onEnd);
        fail(new PayloadTooLarge(bodyLimit));
        return;
      }
      parts.push(chunk);
    };
    const onEnd = () => {
      const text = (parts.length === 1 ? parts[0]! : Buffer.concat(parts, size)).toString('utf8');
      // These listeners stay on the request for as long as its answer (a stream's) lasts: they
      // must not keep its bytes alive that long.
      parts.length = 0;
      let body: unknown;
      try {
        body = parseJsonBody(text, 'POST');
      } catch (err) {
        fail(err);
        return;
      }
      const request: ApiRequest = { id, headers, body, rawJson: text };
      route.handle(request, reply).catch(fail);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    // A client that goes away mid-body: nothing to answer (the socket is closing).
    req.on('error', () => {});
    return true;
  };
}
