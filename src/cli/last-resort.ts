import type { Logger } from '../observability/logger.js';

/**
 * The last defence of a serving process: a promise rejected outside every request (a bug; what
 * a worker or a client sends is refused where it enters) is logged and the process goes on, rather
 * than Node's default of ending it and cutting every stream in flight. An exception thrown
 * synchronously (uncaughtException) is not caught here: the process's state is unknown then, and
 * it ends as Node ends it.
 */
export function keepServingOnUnhandledRejection(log: Logger): void {
  process.on('unhandledRejection', (reason) => {
    log.error(
      { err: reason instanceof Error ? reason : new Error(String(reason)) },
      'a promise was rejected outside any request: logged, and the gateway goes on',
    );
  });
}
