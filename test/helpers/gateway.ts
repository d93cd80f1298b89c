import { pino } from 'pino';
import { afterEach } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import type { SluiceConfigInput } from '../../src/config/schema.js';
import { Gateway, type GatewayOptions } from '../../src/gateway.js';
import { createMockWorker, type MockWorker, type MockWorkerOptions } from '../../src/mock/mock-worker.js';

/** Test logs are silent unless SLUICE_TEST_LOG names a level. */
const testLogger = () => pino({ level: process.env.SLUICE_TEST_LOG ?? 'silent' });

/** What a test may give a gateway besides its configuration (its logger and metrics are the tests'). */
export type TestGatewayOptions = Omit<GatewayOptions, 'logger' | 'defaultMetrics'>;

export async function startGateway(
  input: SluiceConfigInput = {},
  options: TestGatewayOptions = {},
): Promise<Gateway> {
  const config = parseConfig({
    ...input,
    // The mock worker's fault injection headers pass through, as a tracing header would.
    server: { port: 0, forwardHeaders: ['traceparent', 'x-mock-*'], ...input.server },
    health: { intervalMs: 200, timeoutMs: 500, ...input.health },
    retry: { backoffMs: 5, ...input.retry },
    storage: input.storage ?? { kind: 'sqlite', path: ':memory:' },
  });
  const gateway = new Gateway(config, { ...options, logger: testLogger(), defaultMetrics: false });
  await gateway.start();
  return gateway;
}

export async function startMocks(count: number, options: MockWorkerOptions = {}): Promise<MockWorker[]> {
  return Promise.all(Array.from({ length: count }, () => createMockWorker(options)));
}

export interface MetricOptions {
  /**
   * The value to answer when the metric is registered but no series matches the labels (a
   * counter before its first increment). Without it a missing series is an error, so a renamed
   * label or label value cannot pass as 0.
   */
  absent?: number;
}

/** Parses one exposition line's label set (`a="x",b="y"`), honouring escaped quotes. */
export function parseLabels(labelText: string): Record<string, string> {
  const labels: Record<string, string> = {};
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const m of labelText.matchAll(re))
    labels[m[1]!] = m[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
  return labels;
}

/** Every sample of the exposition `text` whose series name is exactly `name`. */
export function samples(text: string, name: string): { labels: Record<string, string>; value: number }[] {
  const out: { labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const brace = line.indexOf('{');
    const close = line.lastIndexOf('}');
    const labels = brace >= 0 ? parseLabels(line.slice(brace + 1, close)) : {};
    out.push({ labels, value: Number(line.slice(line.lastIndexOf(' ') + 1)) });
  }
  return out;
}

/** Whether the exposition registers `name` (a `# TYPE` line for it, or for the histogram/summary it belongs to). */
export function isRegistered(text: string, name: string): boolean {
  const base = name.replace(/_(bucket|sum|count)$/, '');
  return text
    .split('\n')
    .some((line) => line.startsWith(`# TYPE ${name} `) || line.startsWith(`# TYPE ${base} `));
}

/**
 * The sum of the samples of metric `name` whose labels include `labels`, read over HTTP from
 * /metrics. A metric that is not registered is always an error; a registered metric with no
 * matching series is an error unless `options.absent` gives the value to answer.
 */
export async function metric(
  baseUrl: string,
  name: string,
  labels: Record<string, string> = {},
  options: MetricOptions = {},
): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  if (!isRegistered(text, name))
    throw new Error(`metric ${name} is not registered (no "# TYPE ${name}" line)`);
  const matching = samples(text, name).filter((s) =>
    Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  if (matching.length === 0) {
    if (options.absent !== undefined) return options.absent;
    throw new Error(`metric ${name} has no series with labels ${JSON.stringify(labels)}`);
  }
  return matching.reduce((total, s) => total + s.value, 0);
}

/** `metric`, answering 0 for a registered metric with no matching series yet (a counter never incremented). */
export const metricOrZero = (baseUrl: string, name: string, labels: Record<string, string> = {}) =>
  metric(baseUrl, name, labels, { absent: 0 });

/** Polls `check` every 10 ms until it holds, for at most `ms`. */
export async function eventually(check: () => boolean | Promise<boolean>, ms = 3_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`condition not met within ${ms} ms`);
}

/** POSTs JSON and returns the status, headers and whole body text. */
export async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; text: string; json: () => unknown }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: () => JSON.parse(text) };
}

/** The `data:` payloads of an SSE body, in order. */
export function sseData(text: string): string[] {
  return text
    .split('\n\n')
    .filter((block) => block.length > 0)
    .flatMap((block) =>
      block
        .split('\n')
        .filter((line) => line.startsWith('data: '))
        .map((line) => line.slice(6)),
    );
}

export const chatBody = (extra: Record<string, unknown> = {}) => ({
  model: 'mock-model',
  messages: [{ role: 'user', content: 'hello there' }],
  ...extra,
});

/**
 * Gateways and mock workers that live for one test: started through the returned functions,
 * closed after each test (registers an afterEach hook in the calling suite).
 */
export function perTest(): {
  mocks: (count: number, options?: MockWorkerOptions) => Promise<MockWorker[]>;
  gateway: (input?: SluiceConfigInput, options?: TestGatewayOptions) => Promise<Gateway>;
} {
  const gateways: Gateway[] = [];
  const mocks: MockWorker[] = [];
  afterEach(async () => {
    await Promise.all(gateways.splice(0).map((g) => g.close()));
    await Promise.all(mocks.splice(0).map((m) => m.close()));
  });
  return {
    async mocks(count, options) {
      const started = await startMocks(count, options);
      mocks.push(...started);
      return started;
    },
    async gateway(input, options) {
      const started = await startGateway(input, options);
      gateways.push(started);
      return started;
    },
  };
}
