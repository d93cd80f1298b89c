import type { IncomingHttpHeaders } from 'node:http';
import type { Grant } from '../auth/access-control.js';
import { keyAllowsModel } from '../auth/index.js';
import type { SluiceConfig } from '../config/schema.js';
import type { ModelRule } from '../dispatch/types.js';
import { ModelNotAllowed } from '../errors/auth-errors.js';
import { GatewayShuttingDown } from '../errors/http-errors.js';
import { InvalidValue } from '../errors/request-errors.js';
import type { FlowTicket } from '../flow/flow-control.js';
import type { PipelineContext } from './context.js';
import { headerValue } from './request-headers.js';

/*
 * Admission: what the caller's key lets a request do, on every front and transport. Whether it
 * is served at all (admitRequest), which other models may answer for it (checkedFallbacks), and
 * its place in the gateway's queue when the fleet is full (flowTicket).
 */

/**
 * The phase every generating request begins with, on every front and transport: refused while
 * the gateway drains, then admitted (its key, the model it names, its budget and rate limits).
 * Who is asking comes first: an unknown client learns nothing about the request's validity. An
 * open gateway admits without a turn of the event loop (the hot path of most deployments).
 */
export function admitRequest(
  ctx: PipelineContext,
  request: { readonly headers: IncomingHttpHeaders; readonly body?: unknown },
  answering: { readonly raw: { setHeader(name: string, value: string): unknown } },
  credential?: string,
): Promise<Grant | undefined> | undefined {
  if (ctx.lifecycle.draining) throw new GatewayShuttingDown();
  return ctx.access.open ? undefined : ctx.access.admitBody(request, answering, true, credential);
}

/**
 * Which models the caller's key may use (undefined: every model): the one rule its model was
 * admitted by (AccessControl.admit), its own fallbacks are checked by (checkedFallbacks), and its
 * model's configured fallbacks are filtered by (the dispatcher's chain skips those it may not use).
 */
export function modelRule(grant: Grant | undefined): ModelRule | undefined {
  const key = grant?.key;
  if (key === undefined || key.models === null) return undefined;
  return (model) => keyAllowsModel(key, model);
}

/**
 * The models a client named to answer when its own cannot (its body's `fallbacks`), checked as
 * its model is: each one served (else a 404 model_not_found) and allowed to the caller's key
 * (else a 403 model_not_allowed). Undefined when the client named none: the model's configured
 * fallbacks apply then, less those the key may not use (`mayUse`, modelRule).
 */
export function checkedFallbacks(
  ctx: PipelineContext,
  mayUse: ModelRule | undefined,
  fallbacks: readonly string[] | null | undefined,
): readonly string[] | undefined {
  if (fallbacks === undefined || fallbacks === null) return undefined;
  for (const model of fallbacks) {
    ctx.dispatcher.assertModel(model);
    if (mayUse !== undefined && !mayUse(model)) throw new ModelNotAllowed(model);
  }
  return fallbacks;
}

type FlowSettings = SluiceConfig['flow'];

/** The class indexes of a `flow` section, read once. */
const indexes = new WeakMap<FlowSettings, ReadonlyMap<string, number>>();

function classIndex(flow: FlowSettings): ReadonlyMap<string, number> {
  let map = indexes.get(flow);
  if (!map) {
    map = new Map(flow.classes.map((name, i) => [name, i]));
    indexes.set(flow, map);
  }
  return map;
}

/**
 * A request's flow-control ticket (dispatch/flow-control.ts): its tenant (its API key; without
 * keys, the value of `flow.tenantHeader` when set), its priority class (its key's in `flow.keys`,
 * by id or name, else `flow.defaultClass`; the request's `flow.priorityHeader` may lower it, never
 * raise it), and its queue deadline (its class's, which `flow.maxWaitHeader` may shorten).
 * Throws InvalidValue (400) for a header naming no class or no positive number of ms.
 */
export function flowTicket(
  config: Pick<SluiceConfig, 'flow'>,
  grant: Grant | undefined,
  headers: IncomingHttpHeaders,
): FlowTicket {
  const flow = config.flow;
  const classes = classIndex(flow);
  const key = grant?.key;
  const own =
    key === undefined ? undefined : (flow.keys[key.id] ?? (key.name ? flow.keys[key.name] : undefined));
  let priority = classes.get(own?.priority ?? flow.defaultClass)!;
  const asked = headerValue(headers, flow.priorityHeader)?.trim().toLowerCase();
  if (asked !== undefined && asked !== '') {
    const index = classes.get(asked);
    if (index === undefined)
      throw new InvalidValue(
        `${flow.priorityHeader} must be one of ${flow.classes.join(', ')}, got '${asked.slice(0, 64)}'.`,
        flow.priorityHeader,
      );
    // A request may lower its class, not raise it past its key's.
    priority = Math.max(priority, index);
  }
  let maxWaitMs = flow.classMaxWaitMs[flow.classes[priority]!] ?? flow.maxWaitMs;
  const wait = headerValue(headers, flow.maxWaitHeader);
  if (wait !== undefined) {
    const ms = Number(wait.trim());
    if (wait.trim() === '' || !Number.isSafeInteger(ms) || ms <= 0)
      throw new InvalidValue(
        `${flow.maxWaitHeader} must be a positive whole number of milliseconds, got '${wait.slice(0, 64)}'.`,
        flow.maxWaitHeader,
      );
    maxWaitMs = Math.min(maxWaitMs, ms);
  }
  const tenant =
    key?.id ?? (flow.tenantHeader === undefined ? '' : (headerValue(headers, flow.tenantHeader) ?? ''));
  return { tenant, priority, maxWaitMs };
}
