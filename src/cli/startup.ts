import { createServer } from 'node:net';

/** A start-up failure said in one line to the operator (no stack trace), with its exit code. */
export class StartupError extends Error {
  override readonly name = 'StartupError';
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/** Fails at once when `host:port` cannot be listened on (checked before anything slow starts). */
export async function assertPortFree(host: string, port: number): Promise<void> {
  if (port === 0) return;
  const server = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host, port, exclusive: true }, resolve);
    });
  } catch (err) {
    throw new StartupError(listenFailure(err, host, port));
  } finally {
    server.close();
  }
}

/** The one line for an error a listen raised. */
export function listenFailure(err: unknown, host: string, port: number): string {
  const code = (err as { code?: string }).code;
  if (code === 'EADDRINUSE')
    return `port ${port} on ${host} is already in use: stop what listens there, or choose another with --port`;
  if (code === 'EACCES')
    return `no permission to listen on ${host}:${port}: choose a port above 1023 with --port`;
  if (code === 'EADDRNOTAVAIL') return `cannot listen on ${host}: no such address on this machine (--host)`;
  return `cannot listen on ${host}:${port}: ${(err as Error).message}`;
}

/**
 * The one line an operator sees for an error that ended the start: a typed start-up error as it
 * is, anything else as its message (the stack only with SLUICE_DEBUG=1).
 */
export function reportStartupFailure(err: unknown): number {
  const code = (err as { code?: string }).code;
  const message =
    err instanceof StartupError
      ? err.message
      : code === 'EADDRINUSE' || code === 'EACCES'
        ? listenFailure(
            err,
            String((err as { address?: string }).address ?? 'the host'),
            Number((err as { port?: number }).port ?? 0),
          )
        : err instanceof Error
          ? err.message.split('\n')[0]!
          : String(err);
  console.error(`sluice: ${message}`);
  if (process.env.SLUICE_DEBUG === '1' && err instanceof Error && err.stack) console.error(err.stack);
  return err instanceof StartupError ? err.exitCode : 1;
}
