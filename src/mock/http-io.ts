import type { IncomingMessage, ServerResponse } from 'node:http';
import { engineError, errorTypeOf } from './bodies.js';

/** The mock's raw node:http plumbing: a request's body and headers in, a JSON answer or an engine error out. */

export function send(
  res: ServerResponse,
  status: number,
  body: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(body);
}

export function sendError(res: ServerResponse, status: number, message: string): void {
  send(res, status, engineError(message, errorTypeOf(status), status));
}

export function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () =>
      resolve(parts.length === 1 ? parts[0]!.toString('utf8') : Buffer.concat(parts).toString('utf8')),
    );
    req.on('error', reject);
  });
}

export function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return typeof value === 'string' ? value : value?.[0];
}
