import type { IncomingHttpHeaders } from 'node:http';
import { MalformedDataParallelRank } from '../errors/request-content-errors.js';
import { InvalidValue } from '../errors/request-errors.js';

/** A header's first value. */
export function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** `X-Data-Parallel-Rank`: the engine rank a request asks for (vLLM data parallelism). */
export function parseRank(header: string | string[] | undefined): number | undefined {
  if (header === undefined) return undefined;
  const raw = Array.isArray(header) ? header[0] : header;
  const rank = Number(raw);
  if (raw === undefined || raw.trim() === '' || !Number.isInteger(rank) || rank < 0) {
    throw new MalformedDataParallelRank(raw);
  }
  return rank;
}

/** `X-Sluice-Resume: on|off` turns mid-stream resume on or off for one request. */
export function parseResumeHeader(header: string | string[] | undefined): boolean | undefined {
  if (header === undefined) return undefined;
  const value = (Array.isArray(header) ? header[0] : header)?.trim().toLowerCase();
  if (value === 'on' || value === 'true' || value === '1') return true;
  if (value === 'off' || value === 'false' || value === '0') return false;
  throw new InvalidValue(`X-Sluice-Resume must be on or off, got '${value}'.`, 'x-sluice-resume');
}
