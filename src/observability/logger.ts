import { type Logger, pino } from 'pino';

export type { Logger } from 'pino';

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return pino(
    { level, base: { service: 'sluice' }, timestamp: pino.stdTimeFunctions.isoTime },
    destination ?? pino.destination({ sync: false }),
  );
}
