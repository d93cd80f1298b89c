/**
 * The floor: the least any Node.js relay can cost on this machine. A bare node:http server that
 * forwards each request to the worker through an undici pool and writes the answer back (each
 * upstream read of a stream written at once), with no validation, routing, metrics, logging or
 * stream checks. The benchmark runs it beside the gateway so that the gateway's figures can be
 * read against what the runtime and the kernel cost by themselves.
 *
 * Run as its own process: `tsx bench/floor-relay.ts <worker-origin>`; prints {"url":...} when listening.
 */
import { createServer } from 'node:http';
import { Pool } from 'undici';

const upstream = process.argv[2];
if (!upstream) throw new Error('usage: floor-relay.ts <worker-origin>');
const pool = new Pool(upstream, { connections: 2048, pipelining: 1 });

const server = createServer((req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (chunk: Buffer) => parts.push(chunk));
  req.on('end', () => {
    const abort = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    pool
      .request({
        method: 'POST',
        path: req.url ?? '/',
        headers: { 'content-type': 'application/json' },
        body: Buffer.concat(parts),
        signal: abort.signal,
      })
      .then(
        ({ statusCode, headers, body }) => {
          res.writeHead(statusCode, { 'content-type': String(headers['content-type'] ?? '') });
          body.on('data', (chunk: Buffer) => {
            if (!res.write(chunk)) {
              body.pause();
              res.once('drain', () => body.resume());
            }
          });
          body.on('end', () => res.end());
          body.on('error', () => res.destroy());
        },
        () => {
          if (!res.headersSent) res.writeHead(502);
          res.end();
        },
      );
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  console.log(JSON.stringify({ url: `http://127.0.0.1:${port}` }));
});
process.on('SIGTERM', () => process.exit(0));
