import { describe, expect, it } from 'vitest';
import { loadConfig, parseConfig } from '../src/config/load.js';
import { Worker } from '../src/workers/worker.js';
import { chatBody, perTest, post, sseData } from './helpers/gateway.js';

interface ErrorBody {
  error: { message: string; code: string };
}

/**
 * API clients never learn a worker's host and port: `X-Sluice-Worker` and error messages name
 * its configured id or an opaque `worker-<n>`, and `server.exposeWorker: false` hides even that.
 * Logs, metrics and the admin API keep the real id.
 */
describe('which worker served a request, as clients see it', () => {
  const fx = perTest();

  it('by default: the configured id, else worker-<n>, never host:port', async () => {
    const workers = await fx.mocks(2);
    const gateway = await fx.gateway({
      routing: { policy: 'round_robin' },
      retry: { maxAttempts: 1 },
      health: { intervalMs: 60_000 },
      workers: [{ url: workers[0]!.url }, { url: workers[1]!.url, id: 'gpu-b' }],
    });
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const stream = i % 2 === 0;
      const res = await post(`${gateway.url}/v1/chat/completions`, chatBody({ stream, max_tokens: 2 }));
      expect(res.status).toBe(200);
      seen.add(res.headers.get('x-sluice-worker') ?? '');
    }
    const responses = await post(`${gateway.url}/v1/responses`, { model: 'mock-model', input: 'hi' });
    seen.add(responses.headers.get('x-sluice-worker') ?? '');
    expect([...seen].sort()).toEqual(['gpu-b', 'worker-1']);

    // An engine error names the worker by its public id, not by its address.
    const host = new URL(workers[0]!.url).host;
    const failed = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), {
      'x-mock-fault': 'http_500',
    });
    const other = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), {
      'x-mock-fault': 'http_500',
    });
    const messages = [failed, other].map((r) => (r.json() as ErrorBody).error.message);
    expect(messages.some((m) => m.includes('worker-1'))).toBe(true);
    for (const m of messages) expect(m).not.toContain(host);

    // A worker that refuses connections: undici's message carries the address; the client's does not.
    await workers[0]!.close();
    const refused = [
      await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 })),
      await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 })),
    ].find((r) => r.status === 502)!;
    const error = (refused.json() as ErrorBody).error;
    expect(error.code).toBe('upstream_connect_error');
    expect(error.message).toContain('worker-1');
    expect(error.message).not.toContain(host);
    expect(error.message).not.toContain('127.0.0.1');

    // Operators still see the real id.
    const admin = (await (await fetch(`${gateway.url}/admin/workers`)).json()) as {
      data: { id: string; publicId: string }[];
    };
    expect(admin.data.map((w) => [w.id, w.publicId])).toEqual([
      [host, 'worker-1'],
      ['gpu-b', 'gpu-b'],
    ]);
    const scrape = await (await fetch(`${gateway.url}/metrics`)).text();
    expect(scrape).toContain(`worker="${host}"`);
  });

  it('server.exposeWorker: false hides the header and cuts worker names out of client errors', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({
      server: { exposeWorker: false },
      retry: { maxAttempts: 1 },
      health: { intervalMs: 60_000 },
      workers: [{ url: workers[0]!.url, id: 'gpu-secret' }],
      resume: { enabled: true },
    });
    const host = new URL(workers[0]!.url).host;
    const answers = [
      await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 2 })),
      await post(`${gateway.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 2 })),
      await post(`${gateway.url}/v1/responses`, { model: 'mock-model', input: 'hi' }),
      await post(`${gateway.url}/v1/responses`, { model: 'mock-model', input: 'hi', stream: true }),
    ];
    for (const res of answers) {
      expect(res.status).toBe(200);
      expect(res.headers.get('x-sluice-worker')).toBeNull();
    }
    // Nothing in an answer names the worker.
    expect(answers[2]!.text).not.toContain('gpu-secret');
    expect(sseData(answers[3]!.text).join('')).not.toContain('gpu-secret');

    const failed = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }), {
      'x-mock-fault': 'http_500',
    });
    expect(failed.status).toBe(502);
    const message = (failed.json() as ErrorBody).error.message;
    expect(message).toMatch(/^The worker answered HTTP 500/);
    expect(message).not.toContain('gpu-secret');
    expect(message).not.toContain(host);

    await workers[0]!.close();
    const refused = await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    expect(refused.status).toBe(502);
    const text = (refused.json() as ErrorBody).error.message;
    expect(text).toMatch(/^Could not reach the worker/);
    expect(text).not.toContain('gpu-secret');
    expect(text).not.toContain('127.0.0.1');

    // The admin API and metrics keep the real id.
    const admin = (await (await fetch(`${gateway.url}/admin/workers`)).json()) as { data: { id: string }[] };
    expect(admin.data[0]!.id).toBe('gpu-secret');
    expect(await (await fetch(`${gateway.url}/metrics`)).text()).toContain('worker="gpu-secret"');
  });

  it('redaction replaces whole names only', () => {
    const config = parseConfig({});
    const make = (exposed: boolean) =>
      new Worker(
        { url: 'http://vllm:8000' },
        config.workerDefaults,
        config.breaker,
        'static',
        undefined,
        'worker-7',
        undefined,
        exposed,
      );
    const shown = make(true);
    const hidden = make(false);
    const message =
      'Could not reach worker vllm:8000: getaddrinfo ENOTFOUND vllm (vllm-engine at http://vllm:8000)';
    expect(shown.redact(message)).toBe(
      'Could not reach worker worker-7: getaddrinfo ENOTFOUND worker-7 (vllm-engine at worker-7)',
    );
    expect(hidden.redact(message)).toBe('Could not reach the worker: getaddrinfo ENOTFOUND (vllm-engine at)');
    expect(hidden.redact('Worker vllm:8000 answered HTTP 500.')).toBe('The worker answered HTTP 500.');
    void shown.close(false);
    void hidden.close(false);
  });

  it('SLUICE_EXPOSE_WORKER sets server.exposeWorker', () => {
    expect(loadConfig({}, {}).server.exposeWorker).toBe(true);
    expect(loadConfig({}, { SLUICE_EXPOSE_WORKER: 'false' }).server.exposeWorker).toBe(false);
    expect(loadConfig({}, { SLUICE_EXPOSE_WORKER: 'true' }).server.exposeWorker).toBe(true);
  });
});
