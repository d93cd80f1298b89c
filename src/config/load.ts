import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { configSchema, type SluiceConfig } from './schema.js';

/** A configuration that does not validate. The message lists every bad value by its path. */
export class ConfigError extends Error {
  readonly code = 'invalid_config';
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

type Json = Record<string, unknown>;

/** Command-line overrides: flags win over the environment, which wins over the file. */
export interface ConfigFlags {
  config?: string | undefined;
  host?: string | undefined;
  port?: number | undefined;
  worker?: string[] | undefined;
  policy?: string | undefined;
  logLevel?: string | undefined;
  dataDir?: string | undefined;
  storage?: string | undefined;
  adminKey?: string | undefined;
  processes?: number | undefined;
}

/** Environment variables and the config path each one sets. */
const ENV_PATHS: Record<string, { path: string[]; kind: 'string' | 'number' | 'list' }> = {
  SLUICE_HOST: { path: ['server', 'host'], kind: 'string' },
  SLUICE_PORT: { path: ['server', 'port'], kind: 'number' },
  SLUICE_BODY_LIMIT_BYTES: { path: ['server', 'bodyLimitBytes'], kind: 'number' },
  SLUICE_SHUTDOWN_GRACE_MS: { path: ['server', 'shutdownGraceMs'], kind: 'number' },
  SLUICE_PROCESSES: { path: ['server', 'processes'], kind: 'number' },
  SLUICE_LOG_LEVEL: { path: ['log', 'level'], kind: 'string' },
  SLUICE_POLICY: { path: ['routing', 'policy'], kind: 'string' },
  SLUICE_WORKERS: { path: ['workers'], kind: 'list' },
  SLUICE_HEADERS_TIMEOUT_MS: { path: ['timeouts', 'headersMs'], kind: 'number' },
  SLUICE_IDLE_TIMEOUT_MS: { path: ['timeouts', 'idleMs'], kind: 'number' },
  SLUICE_DEADLINE_MS: { path: ['timeouts', 'deadlineMs'], kind: 'number' },
  SLUICE_HEALTH_INTERVAL_MS: { path: ['health', 'intervalMs'], kind: 'number' },
  SLUICE_RETRY_MAX_ATTEMPTS: { path: ['retry', 'maxAttempts'], kind: 'number' },
  SLUICE_DATA_DIR: { path: ['dataDir'], kind: 'string' },
  SLUICE_STORAGE: { path: ['storage', 'kind'], kind: 'string' },
  SLUICE_SQLITE_PATH: { path: ['storage', 'path'], kind: 'string' },
  SLUICE_POSTGRES_URL: { path: ['storage', 'url'], kind: 'string' },
  SLUICE_REDIS_URL: { path: ['redis', 'url'], kind: 'string' },
  SLUICE_ADMIN_KEY: { path: ['auth', 'adminKey'], kind: 'string' },
};

export const ENV_VARIABLES = Object.keys(ENV_PATHS);

function setPath(target: Json, path: readonly string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Json;
  }
  node[path[path.length - 1]!] = value;
}

function workersFromUrls(urls: readonly string[]): Json[] {
  return urls.map((url) => ({ url }));
}

function readFileLayer(file: string): Json {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`Cannot read config file ${file}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`Config file ${file} is not valid YAML: ${(err as Error).message}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ConfigError(`Config file ${file} must hold a mapping at its top level.`);
  }
  return parsed as Json;
}

function applyEnv(layer: Json, env: NodeJS.ProcessEnv): void {
  for (const [name, { path, kind }] of Object.entries(ENV_PATHS)) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    if (kind === 'number') {
      const value = Number(raw);
      if (!Number.isFinite(value)) throw new ConfigError(`${name}=${raw} is not a number.`);
      setPath(layer, path, value);
    } else if (kind === 'list') {
      setPath(
        layer,
        path,
        workersFromUrls(
          raw
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean),
        ),
      );
    } else {
      setPath(layer, path, raw);
    }
  }
}

function applyFlags(layer: Json, flags: ConfigFlags): void {
  if (flags.host !== undefined) setPath(layer, ['server', 'host'], flags.host);
  if (flags.port !== undefined) setPath(layer, ['server', 'port'], flags.port);
  if (flags.policy !== undefined) setPath(layer, ['routing', 'policy'], flags.policy);
  if (flags.logLevel !== undefined) setPath(layer, ['log', 'level'], flags.logLevel);
  if (flags.dataDir !== undefined) setPath(layer, ['dataDir'], flags.dataDir);
  if (flags.storage !== undefined) setPath(layer, ['storage', 'kind'], flags.storage);
  if (flags.adminKey !== undefined) setPath(layer, ['auth', 'adminKey'], flags.adminKey);
  if (flags.processes !== undefined) setPath(layer, ['server', 'processes'], flags.processes);
  if (flags.worker !== undefined && flags.worker.length > 0) {
    setPath(layer, ['workers'], workersFromUrls(flags.worker));
  }
}

export function formatIssues(issues: readonly z.core.$ZodIssue[]): string {
  return issues
    .map((issue) => `  - ${issue.path.length > 0 ? issue.path.join('.') : '(root)'}: ${issue.message}`)
    .join('\n');
}

/** Validates a configuration object (defaults filled in), throwing a ConfigError that lists each problem. */
export function parseConfig(input: unknown): SluiceConfig {
  const result = configSchema.safeParse(input);
  if (!result.success) throw new ConfigError(`Invalid configuration:\n${formatIssues(result.error.issues)}`);
  return result.data;
}

/**
 * Builds the configuration from, in rising precedence: the YAML file (`--config` or
 * SLUICE_CONFIG), SLUICE_* environment variables, and command-line flags.
 */
export function loadConfig(flags: ConfigFlags = {}, env: NodeJS.ProcessEnv = process.env): SluiceConfig {
  const file = flags.config ?? env.SLUICE_CONFIG;
  const layer: Json = file ? readFileLayer(file) : {};
  applyEnv(layer, env);
  applyFlags(layer, flags);
  return parseConfig(layer);
}
