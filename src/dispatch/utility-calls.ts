import { randomBytes } from 'node:crypto';
import type { SluiceError } from '../errors/base.js';
import {
  InconsistentUtilityResults,
  UtilityCallClosed,
  UtilityCallFailed,
  UtilityResultDecode,
} from '../errors/utility-errors.js';
import { callWorker } from '../workers/upstream-call.js';
import type { Worker } from '../workers/worker.js';

/**
 * Admin calls fanned out to every worker of a model. Engines name the same operation
 * differently, so each method lists its endpoints in order; a 404 or 405 moves on to the next.
 */
export interface UtilityMethod {
  readonly name: string;
  readonly endpoints: readonly { method: 'GET' | 'POST'; path: string }[];
  /** Every worker must answer the same value (else InconsistentUtilityResults). */
  readonly consensus: boolean;
  /** Turns a 2xx body into the call's value; throws when it does not decode. */
  decode(text: string): unknown;
}

const ignoreBody = (): unknown => null;

export const UTILITY_METHODS = {
  flush_cache: {
    name: 'flush_cache',
    // SGLang: /flush_cache; vLLM: /reset_prefix_cache (dev mode).
    endpoints: [
      { method: 'POST', path: '/flush_cache' },
      { method: 'POST', path: '/reset_prefix_cache' },
    ],
    consensus: false,
    decode: ignoreBody,
  },
  is_sleeping: {
    name: 'is_sleeping',
    endpoints: [{ method: 'GET', path: '/is_sleeping' }],
    consensus: true,
    decode(text: string): unknown {
      const parsed = JSON.parse(text) as { is_sleeping?: unknown };
      if (typeof parsed.is_sleeping !== 'boolean') throw new Error('`is_sleeping` is not a boolean');
      return parsed.is_sleeping;
    },
  },
  sleep: {
    name: 'sleep',
    // vLLM: /sleep; SGLang: /release_memory_occupation.
    endpoints: [
      { method: 'POST', path: '/sleep' },
      { method: 'POST', path: '/release_memory_occupation' },
    ],
    consensus: false,
    decode: ignoreBody,
  },
  wake_up: {
    name: 'wake_up',
    endpoints: [
      { method: 'POST', path: '/wake_up' },
      { method: 'POST', path: '/resume_memory_occupation' },
    ],
    consensus: false,
    decode: ignoreBody,
  },
} satisfies Record<string, UtilityMethod>;

export interface WorkerUtilityResult {
  worker: string;
  ok: boolean;
  value?: unknown;
  error?: { code: string; message: string };
}

export interface UtilityOutcome {
  callId: string;
  method: string;
  results: WorkerUtilityResult[];
  /** The consensus value, for a consensus method whose workers agree. */
  value?: unknown;
  /** The first failure, or the disagreement: the call as a whole failed. */
  error?: SluiceError;
}

async function callOne(
  worker: Worker,
  method: UtilityMethod,
  callId: string,
  timeoutMs: number,
): Promise<unknown> {
  let lastStatus = 0;
  for (const endpoint of method.endpoints) {
    let answer: { status: number; text: string };
    try {
      answer = await callWorker(worker, endpoint.method, endpoint.path, timeoutMs);
    } catch (err) {
      const name = (err as Error).name;
      const code = (err as { code?: string }).code;
      if (name === 'TimeoutError' || name === 'AbortError' || code === 'UND_ERR_HEADERS_TIMEOUT') {
        throw new UtilityCallClosed(
          method.name,
          callId,
          `${worker.id} did not answer within ${timeoutMs} ms`,
        );
      }
      throw new UtilityCallFailed(method.name, callId, `${worker.id}: ${(err as Error).message}`);
    }
    lastStatus = answer.status;
    if (answer.status === 404 || answer.status === 405) continue;
    if (answer.status < 200 || answer.status >= 300) {
      throw new UtilityCallFailed(method.name, callId, `${worker.id} answered HTTP ${answer.status}`);
    }
    try {
      return method.decode(answer.text);
    } catch (err) {
      throw new UtilityResultDecode(method.name, callId, `${worker.id}: ${(err as Error).message}`);
    }
  }
  throw new UtilityCallFailed(
    method.name,
    callId,
    `${worker.id} does not support it (HTTP ${lastStatus} on ${method.endpoints.map((e) => e.path).join(', ')})`,
  );
}

/** Calls `method` on every worker at once and gathers each one's result. */
export async function fanOut(
  workers: readonly Worker[],
  method: UtilityMethod,
  timeoutMs: number,
): Promise<UtilityOutcome> {
  const callId = `util_${randomBytes(6).toString('hex')}`;
  const settled = await Promise.allSettled(workers.map((w) => callOne(w, method, callId, timeoutMs)));
  const outcome: UtilityOutcome = { callId, method: method.name, results: [] };
  settled.forEach((result, i) => {
    const worker = workers[i]!.id;
    if (result.status === 'fulfilled') {
      outcome.results.push({ worker, ok: true, value: result.value });
    } else {
      const error = result.reason as SluiceError;
      outcome.results.push({ worker, ok: false, error: { code: error.code, message: error.message } });
      outcome.error ??= error;
    }
  });
  if (!outcome.error && method.consensus) {
    const values = new Set(outcome.results.map((r) => JSON.stringify(r.value)));
    if (values.size > 1) {
      outcome.error = new InconsistentUtilityResults(
        method.name,
        Object.fromEntries(outcome.results.map((r) => [r.worker, r.value])),
      );
    } else {
      outcome.value = outcome.results[0]?.value;
    }
  }
  return outcome;
}
