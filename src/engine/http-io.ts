import type { IncomingMessage, ServerResponse } from 'node:http';

export function sendJson(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(body);
}

export function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', reject);
    req.on('close', () => {
      if (!req.complete) reject(new Error('the client closed the connection before sending its body'));
    });
  });
}

/** Writes, waiting for the socket to drain when its buffer is full (or for it to close). */
export async function writeChunk(res: ServerResponse, chunk: string): Promise<void> {
  if (res.destroyed || res.write(chunk)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      res.off('drain', done).off('close', done);
      resolve();
    };
    res.on('drain', done).on('close', done);
  });
}
