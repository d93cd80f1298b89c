import type { SluiceConfig } from '../config/schema.js';
import { StoreError } from '../errors/storage-errors.js';

/**
 * The one line `sluice serve` prints when the gateway cannot start (storage unreachable, a
 * schema that conflicts, a port in use): what failed and why, never a stack trace.
 */
export function startupFailureLine(err: unknown, config: SluiceConfig): string {
  if (err instanceof StoreError) {
    const cause = causeText(err.cause);
    return oneLine(
      `sluice: cannot start: ${storageLabel(config)}: ${err.message}${cause ? ` (${cause})` : ''} [${err.code}]`,
    );
  }
  return oneLine(`sluice: cannot start: ${err instanceof Error ? err.message : String(err)}`);
}

function storageLabel(config: SluiceConfig): string {
  const { storage } = config;
  if (storage.kind === 'postgres') {
    const schema = storage.schema ? `, schema ${storage.schema}` : '';
    return `PostgreSQL at ${withoutPassword(storage.url ?? '')}${schema}`;
  }
  return `SQLite at ${storage.path ?? `${config.dataDir}/sluice.db`}`;
}

/** The driver's own words (a refused connection, `relation "responses" already exists`). */
function causeText(cause: unknown): string {
  if (cause instanceof AggregateError && cause.message === '') {
    return cause.errors.map((inner) => causeText(inner)).join('; ');
  }
  if (!(cause instanceof Error)) return '';
  const code = (cause as { code?: unknown }).code;
  return typeof code === 'string' && !cause.message.includes(code)
    ? `${code}: ${cause.message}`
    : cause.message;
}

function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(an unparseable URL)';
  }
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ');
}
