/** An MCP server that did not answer within the time allowed. */
export class McpTimeout extends Error {
  constructor(readonly ms: number) {
    super(`The MCP server did not answer within ${ms} ms.`);
    this.name = 'McpTimeout';
  }
}

/** Races a promise against a timeout and an abort signal (the SDK's own timeout does not cover connect). */
export function withTimeout<T>(promise: Promise<T>, ms: number, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => done(() => reject(new McpTimeout(ms))), ms);
    const onAbort = () => done(() => reject(signal.reason ?? new Error('aborted')));
    const done = (fn: () => void) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      fn();
    };
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => done(() => resolve(value)),
      (err: unknown) => done(() => reject(err)),
    );
  });
}
