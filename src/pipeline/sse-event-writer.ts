import type { ServerResponse } from 'node:http';
import type { EventWriter } from '../responses/response-run.js';
import { drainWaiter } from './drain-waiter.js';

const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/**
 * Writes Responses events to a client as named SSE events; the terminal event ends the
 * response. `res.write` returning false is the backpressure signal the run pauses the engine on.
 */
export function sseEventWriter(res: ServerResponse): EventWriter {
  const waitForDrain = drainWaiter(res);
  return {
    write(json, type) {
      if (res.writableEnded || res.destroyed) return true;
      const ok = res.write(`event: ${type}\ndata: ${json}\n\n`);
      if (TERMINAL.has(type)) res.end();
      return ok;
    },
    onDrain: waitForDrain,
  };
}
