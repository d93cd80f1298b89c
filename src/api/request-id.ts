import { randomUUID } from 'node:crypto';

const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** A client's X-Request-Id is kept when it is a sane token; otherwise the gateway makes one. */
export function requestId(header: string | string[] | undefined): string {
  if (typeof header === 'string' && CLIENT_REQUEST_ID.test(header)) return header;
  return `req_${randomUUID().replaceAll('-', '')}`;
}
