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
  logFormat?: string | undefined;
  dataDir?: string | undefined;
  storage?: string | undefined;
  adminKey?: string | undefined;
  processes?: number | undefined;
  /** The OTLP/HTTP traces endpoint; giving it turns tracing on. */
  tracingEndpoint?: string | undefined;
}

/** Environment variables and the config path each one sets. */
const ENV_PATHS: Record<
  string,
  { path: string[]; kind: 'string' | 'number' | 'boolean' | 'list' | 'strings' }
> = {
  SLUICE_HOST: { path: ['server', 'host'], kind: 'string' },
  SLUICE_PORT: { path: ['server', 'port'], kind: 'number' },
  SLUICE_BODY_LIMIT_BYTES: { path: ['server', 'bodyLimitBytes'], kind: 'number' },
  SLUICE_SHUTDOWN_GRACE_MS: { path: ['server', 'shutdownGraceMs'], kind: 'number' },
  SLUICE_REQUEST_TIMEOUT_MS: { path: ['server', 'requestTimeoutMs'], kind: 'number' },
  SLUICE_PROCESSES: { path: ['server', 'processes'], kind: 'number' },
  SLUICE_EXPOSE_WORKER: { path: ['server', 'exposeWorker'], kind: 'boolean' },
  SLUICE_LOG_LEVEL: { path: ['log', 'level'], kind: 'string' },
  SLUICE_LOG_FORMAT: { path: ['log', 'format'], kind: 'string' },
  SLUICE_POLICY: { path: ['routing', 'policy'], kind: 'string' },
  SLUICE_WORKERS: { path: ['workers'], kind: 'list' },
  SLUICE_HEADERS_TIMEOUT_MS: { path: ['timeouts', 'headersMs'], kind: 'number' },
  SLUICE_IDLE_TIMEOUT_MS: { path: ['timeouts', 'idleMs'], kind: 'number' },
  SLUICE_FIRST_TOKEN_TIMEOUT_MS: { path: ['timeouts', 'firstTokenMs'], kind: 'number' },
  SLUICE_DEADLINE_MS: { path: ['timeouts', 'deadlineMs'], kind: 'number' },
  SLUICE_MAX_EVENT_BYTES: { path: ['limits', 'maxEventBytes'], kind: 'number' },
  SLUICE_MAX_PREFACE_BYTES: { path: ['limits', 'maxPrefaceBytes'], kind: 'number' },
  SLUICE_MAX_BODY_BYTES: { path: ['limits', 'maxBodyBytes'], kind: 'number' },
  SLUICE_MAX_OUTPUT_TOKENS: { path: ['limits', 'maxOutputTokens'], kind: 'number' },
  SLUICE_MAX_BATCH_INPUTS: { path: ['limits', 'maxBatchInputs'], kind: 'number' },
  SLUICE_BATCH_SPLIT_SIZE: { path: ['routing', 'batchSplitSize'], kind: 'number' },
  SLUICE_HEALTH_INTERVAL_MS: { path: ['health', 'intervalMs'], kind: 'number' },
  SLUICE_RETRY_MAX_ATTEMPTS: { path: ['retry', 'maxAttempts'], kind: 'number' },
  SLUICE_DATA_DIR: { path: ['dataDir'], kind: 'string' },
  SLUICE_STORAGE: { path: ['storage', 'kind'], kind: 'string' },
  SLUICE_SQLITE_PATH: { path: ['storage', 'path'], kind: 'string' },
  SLUICE_POSTGRES_URL: { path: ['storage', 'url'], kind: 'string' },
  SLUICE_REPLICA_HEARTBEAT_MS: { path: ['responses', 'heartbeatMs'], kind: 'number' },
  SLUICE_REPLICA_LEASE_MS: { path: ['responses', 'leaseMs'], kind: 'number' },
  SLUICE_ORPHAN_SWEEP_MS: { path: ['responses', 'sweepIntervalMs'], kind: 'number' },
  SLUICE_FOLLOW_POLL_MS: { path: ['responses', 'followPollMs'], kind: 'number' },
  SLUICE_WS_MAX_CONNECTION_MS: { path: ['responses', 'websocket', 'maxConnectionMs'], kind: 'number' },
  SLUICE_REDIS_URL: { path: ['redis', 'url'], kind: 'string' },
  SLUICE_ADMIN_KEY: { path: ['auth', 'adminKey'], kind: 'string' },
  SLUICE_MCP_ALLOWED_SERVERS: { path: ['mcp', 'allowedServers'], kind: 'strings' },
  SLUICE_TRACING_ENABLED: { path: ['tracing', 'enabled'], kind: 'boolean' },
  SLUICE_TRACING_ENDPOINT: { path: ['tracing', 'endpoint'], kind: 'string' },
  SLUICE_TRACING_SERVICE_NAME: { path: ['tracing', 'serviceName'], kind: 'string' },
  SLUICE_TRACING_SAMPLE_RATIO: { path: ['tracing', 'sampleRatio'], kind: 'number' },
};

const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['0', 'false', 'no', 'off']);

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

/** `key=value,key2=value2` (values percent-encoded), as OTEL_EXPORTER_OTLP_HEADERS is written. */
function parseOtelHeaders(name: string, raw: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of raw.split(',')) {
    if (part.trim() === '') continue;
    const eq = part.indexOf('=');
    if (eq <= 0) throw new ConfigError(`${name}: '${part.trim()}' is not key=value.`);
    try {
      out[decodeURIComponent(part.slice(0, eq).trim())] = decodeURIComponent(part.slice(eq + 1).trim());
    } catch {
      throw new ConfigError(`${name}: '${part.trim()}' is not percent-encoded correctly.`);
    }
  }
  return out;
}

/** The OpenTelemetry SDK's own variables, mapped onto the `tracing` section (they do not turn it on). */
function applyOtelEnv(layer: Json, env: NodeJS.ProcessEnv): void {
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (traces) setPath(layer, ['tracing', 'endpoint'], traces);
  else if (base) setPath(layer, ['tracing', 'endpoint'], `${base.replace(/\/+$/, '')}/v1/traces`);
  if (env.OTEL_SERVICE_NAME) setPath(layer, ['tracing', 'serviceName'], env.OTEL_SERVICE_NAME);
  const headers = {
    ...(env.OTEL_EXPORTER_OTLP_HEADERS
      ? parseOtelHeaders('OTEL_EXPORTER_OTLP_HEADERS', env.OTEL_EXPORTER_OTLP_HEADERS)
      : {}),
    ...(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS
      ? parseOtelHeaders('OTEL_EXPORTER_OTLP_TRACES_HEADERS', env.OTEL_EXPORTER_OTLP_TRACES_HEADERS)
      : {}),
  };
  if (Object.keys(headers).length > 0) {
    const tracing = layer.tracing as Json | undefined;
    const fromFile = tracing?.headers;
    setPath(layer, ['tracing', 'headers'], {
      ...(typeof fromFile === 'object' && fromFile !== null ? fromFile : {}),
      ...headers,
    });
  }
}

function applyEnv(layer: Json, env: NodeJS.ProcessEnv): void {
  applyOtelEnv(layer, env);
  for (const [name, { path, kind }] of Object.entries(ENV_PATHS)) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    if (kind === 'boolean') {
      const value = raw.trim().toLowerCase();
      if (!TRUE.has(value) && !FALSE.has(value))
        throw new ConfigError(`${name}=${raw} is not true or false.`);
      setPath(layer, path, TRUE.has(value));
    } else if (kind === 'number') {
      const value = Number(raw);
      if (!Number.isFinite(value)) throw new ConfigError(`${name}=${raw} is not a number.`);
      setPath(layer, path, value);
    } else if (kind === 'strings') {
      setPath(
        layer,
        path,
        raw
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean),
      );
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
  if (flags.logFormat !== undefined) setPath(layer, ['log', 'format'], flags.logFormat);
  if (flags.dataDir !== undefined) setPath(layer, ['dataDir'], flags.dataDir);
  if (flags.storage !== undefined) setPath(layer, ['storage', 'kind'], flags.storage);
  if (flags.adminKey !== undefined) setPath(layer, ['auth', 'adminKey'], flags.adminKey);
  if (flags.processes !== undefined) setPath(layer, ['server', 'processes'], flags.processes);
  if (flags.tracingEndpoint !== undefined) {
    setPath(layer, ['tracing', 'endpoint'], flags.tracingEndpoint);
    setPath(layer, ['tracing', 'enabled'], true);
  }
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
  if (!result.success) {
    const issues = result.error.issues;
    // One problem is one line; several are listed one per line.
    if (issues.length === 1) {
      const [issue] = issues;
      const path = issue!.path.length > 0 ? issue!.path.join('.') : '(root)';
      throw new ConfigError(`Invalid configuration: ${path}: ${issue!.message}`);
    }
    throw new ConfigError(`Invalid configuration:\n${formatIssues(issues)}`);
  }
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
