import type { IncomingHttpHeaders, ServerResponse } from 'node:http';

/**
 * What the generation routes read of a request. A fastify request has it, and so does the one
 * the framework-free route (raw-json-route.ts) makes: the routes are written against this, not
 * against fastify, so that the hot path can run without the framework.
 */
export interface ApiRequest {
  readonly id: string;
  readonly headers: IncomingHttpHeaders;
  /** The parsed JSON body. */
  readonly body: unknown;
  /** The body's text as the client sent it (forwarded as is when the gateway changes nothing). */
  readonly rawJson: string | undefined;
}

/** What the generation routes do with a reply: a fastify reply's subset, the framework-free reply's whole. */
export interface ApiReply {
  readonly raw: ServerResponse;
  /** The answer has been sent, or the route took the response over (`hijack`). */
  readonly sent: boolean;
  /** Milliseconds since the request arrived. */
  readonly elapsedTime: number;
  code(status: number): ApiReply;
  header(name: string, value: string): ApiReply;
  /** Sends a whole answer: bytes as they are, an object as JSON. */
  send(payload: Buffer | object): ApiReply;
  /** The route writes the response itself from now on (a stream). */
  hijack(): ApiReply;
}

/** A route's handler, written against the exchange types. */
export type ApiHandler = (request: ApiRequest, reply: ApiReply) => Promise<void>;
