/**
 * The floor: the least any Node.js relay can cost on this machine. A bare node:http server that
 * forwards each request to the worker through an undici pool and writes the answer back (each
 * upstream read of a stream written at once), with no validation, routing, metrics, logging or
 * stream checks. The benchmark runs it beside the gateway so that the gateway's figures can be
 * read against what the runtime and the kernel cost by themselves.
 *
 * Two more modes split the distance between the floor and the gateway into what it is made of:
 * - `fastify`: the same relay served through fastify (one route, a string body parser, `reply.send`),
 *   the cost of the HTTP framework alone;
 * - `duties`: the bare relay plus the least work any gateway that keeps sluice's promises must
 *   do per request, with the libraries sluice uses for it: parse the request's JSON (to know its
 *   model), parse the answer's JSON (to check its finish and read its usage) or, on a stream, every
 *   event's (eventsource-parser, then JSON.parse: a malformed or lying chunk is caught only so),
 *   and count and log the request (two prom-client series, one pino line, batched as the
 *   gateway's are);
 * - `checks`: the duties without counting and logging: the JSON parsing alone (the whole answer
 *   held to be parsed, as in `duties`), which splits the duties' cost into the runtime's JSON and
 *   the observing libraries'.
 *
 * Run as its own process: `tsx bench/floor-relay.ts <worker-origin> [bare|fastify|duties|checks]`;
 * prints {"url":...} when listening.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { createParser } from 'eventsource-parser';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { pino } from 'pino';
import { Counter, Histogram, Registry } from 'prom-client';
import { Pool } from 'undici';

const upstream = process.argv[2];
const mode = process.argv[3] ?? 'bare';
if (!upstream || !['bare', 'fastify', 'duties', 'checks'].includes(mode)) {
  throw new Error('usage: floor-relay.ts <worker-origin> [bare|fastify|duties|checks]');
}
const pool = new Pool(upstream, { connections: 2048, pipelining: 1 });

function readBody(req: IncomingMessage, then: (body: Buffer) => void): void {
  const parts: Buffer[] = [];
  req.on('data', (chunk: Buffer) => parts.push(chunk));
  req.on('end', () => then(Buffer.concat(parts)));
}

/** Sends one request upstream, aborted when the client's connection closes before its answer ended. */
function forward(path: string, body: Buffer | string, res: ServerResponse) {
  const abort = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) abort.abort();
  });
  return pool.request({
    method: 'POST',
    path,
    headers: { 'content-type': 'application/json' },
    body,
    signal: abort.signal,
  });
}

/** Writes each upstream read to the client at once, pausing on backpressure. */
function pipeBody(body: Readable, res: ServerResponse, onData?: (chunk: Buffer) => void): void {
  body.on('data', (chunk: Buffer) => {
    onData?.(chunk);
    if (!res.write(chunk)) {
      body.pause();
      res.once('drain', () => body.resume());
    }
  });
  body.on('end', () => res.end());
  body.on('error', () => res.destroy());
}

function failed(res: ServerResponse): void {
  if (!res.headersSent) res.writeHead(502);
  res.end();
}

/** Forwards one request and pipes the answer back. */
function relay(path: string, body: Buffer | string, res: ServerResponse): void {
  forward(path, body, res).then(
    ({ statusCode, headers, body }) => {
      res.writeHead(statusCode, { 'content-type': String(headers['content-type'] ?? '') });
      pipeBody(body, res);
    },
    () => failed(res),
  );
}

function bare(): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => readBody(req, (body) => relay(req.url ?? '/', body, res));
}

/** The duties relay; `observe: false` leaves out the metrics and the log line (the `checks` mode). */
function duties(observe: boolean): (req: IncomingMessage, res: ServerResponse) => void {
  const log = pino(
    { level: 'info', base: { service: 'floor' } },
    pino.destination({ sync: false, minLength: 16 * 1024, maxWrite: 64 * 1024 }),
  );
  const registry = new Registry();
  const requests = new Counter({
    name: 'requests_total',
    help: 'requests',
    labelNames: ['route', 'model', 'status'] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'request_duration_seconds',
    help: 'duration',
    labelNames: ['route', 'model'] as const,
    registers: [registry],
  });
  return (req, res) => {
    const startedAt = performance.now();
    readBody(req, (raw) => {
      const text = raw.toString('utf8');
      const { model, stream } = JSON.parse(text) as { model: string; stream?: boolean };
      const done = (status: number, usage: unknown) => {
        if (!observe) return;
        const seconds = (performance.now() - startedAt) / 1000;
        requests.inc({ route: 'chat', model, status: String(status) });
        duration.observe({ route: 'chat', model }, seconds);
        log.info({ route: 'chat', model, status, durationMs: seconds * 1000, usage }, 'request ended');
      };
      forward(req.url ?? '/', text, res).then(
        async ({ statusCode, headers, body }) => {
          const contentType = String(headers['content-type'] ?? '');
          if (!stream) {
            const answer = Buffer.from(await body.arrayBuffer());
            const json = JSON.parse(answer.toString('utf8')) as { usage?: unknown };
            res.writeHead(statusCode, { 'content-type': contentType, 'content-length': answer.length });
            res.end(answer);
            done(statusCode, json.usage);
            return;
          }
          let usage: unknown;
          const parser = createParser({
            onEvent: ({ data }) => {
              if (data === '[DONE]') return;
              const chunk = JSON.parse(data) as { usage?: unknown };
              if (chunk.usage) usage = chunk.usage;
            },
          });
          res.writeHead(statusCode, { 'content-type': contentType });
          pipeBody(body, res, (chunk) => parser.feed(chunk.toString('utf8')));
          body.once('end', () => done(statusCode, usage));
        },
        () => failed(res),
      );
    });
  };
}

function listening(port: number): void {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${port}` }));
}

if (mode === 'fastify') {
  const app = Fastify({ logger: false });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) =>
    done(null, body),
  );
  // As the gateway does: a whole answer through reply.send, a stream written by hand (hijacked).
  const route = async (request: FastifyRequest, reply: FastifyReply) => {
    const { statusCode, headers, body } = await forward(request.url, request.body as Buffer, reply.raw);
    const contentType = String(headers['content-type'] ?? '');
    if (!contentType.startsWith('text/event-stream')) {
      return reply
        .code(statusCode)
        .header('content-type', contentType)
        .send(Buffer.from(await body.arrayBuffer()));
    }
    reply.hijack();
    reply.raw.writeHead(statusCode, { 'content-type': contentType });
    pipeBody(body, reply.raw);
    return reply;
  };
  app.post('/v1/chat/completions', route);
  app.post('/v1/responses', route);
  await app.listen({ port: 0, host: '127.0.0.1' });
  app.server.keepAliveTimeout = 60_000;
  const address = app.server.address();
  listening(typeof address === 'object' && address ? address.port : 0);
} else {
  const server = createServer(mode === 'bare' ? bare() : duties(mode === 'duties'));
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1', () => {
    const address = server.address();
    listening(typeof address === 'object' && address ? address.port : 0);
  });
}
process.on('SIGTERM', () => process.exit(0));
