import { describe, expect, it } from 'vitest';
import { STREAM_FAILURE_REASONS } from '../src/errors/stream-errors.js';
import { chatBody, metric, perTest, post, samples } from './helpers/gateway.js';

/**
 * Metric labels stay bounded, whatever clients send and whatever engines do: a model no worker
 * serves is `unknown` (never the client's string), and a stream failure's `reason` is one of
 * the closed set.
 */
describe('metric label bounds', () => {
  const fx = perTest();
  const MADE_UP = 'client-made-up-model-7f3a';

  const generate = {
    chat_completions: (url: string, model: string, stream: boolean) =>
      post(`${url}/v1/chat/completions`, { ...chatBody({ stream, max_tokens: 3 }), model }),
    completions: (url: string, model: string, stream: boolean) =>
      post(`${url}/v1/completions`, { model, prompt: 'hi', stream, max_tokens: 3 }),
    responses: (url: string, model: string, stream: boolean) =>
      post(`${url}/v1/responses`, { model, input: 'hi', stream, max_output_tokens: 3 }),
  };

  for (const route of Object.keys(generate) as (keyof typeof generate)[]) {
    it(`${route}: an unknown model is labelled unknown on every metric, never with the client's string`, async () => {
      const workers = await fx.mocks(1);
      const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
      for (const stream of [false, true]) {
        const res = await generate[route](gateway.url, `${MADE_UP}-${stream}`, stream);
        expect(res.status).toBe(404);
        expect((res.json() as { error: { code: string } }).error.code).toBe('model_not_found');
      }
      const text = await (await fetch(`${gateway.url}/metrics`)).text();
      // Not under any metric, any label.
      expect(text).not.toContain(MADE_UP);
      expect(
        await metric(gateway.url, 'sluice_requests_total', { route, model: 'unknown', status: '404' }),
      ).toBe(2);
      expect(
        await metric(gateway.url, 'sluice_request_duration_seconds_count', { route, model: 'unknown' }),
      ).toBe(2);
      // Every series of every metric that has a model label names a served model or `unknown`.
      const models = new Set<string>();
      for (const line of text.split('\n')) {
        const m = /[{,]model="([^"]*)"/.exec(line);
        if (m && !line.startsWith('#')) models.add(m[1]!);
      }
      expect([...models].sort()).toEqual(['unknown']);
    });
  }

  it('stream-failure reasons stay in their closed set after a run of every fault', async () => {
    const workers = await fx.mocks(2, { tokensPerSecond: 200 });
    const gateway = await fx.gateway({
      workers: workers.map((w) => ({ url: w.url })),
      timeouts: { idleMs: 200 },
      breaker: { failureThreshold: 1000 },
      retry: { maxAttempts: 1 },
    });
    const faults = [
      'reset_after:2',
      'drop_after:2',
      'eof_after:2',
      'no_finish',
      'error_frame_after:2',
      'error_frame_str_after:2',
      'event_error_after:2',
      'stall_after:2',
      'malformed_after:2',
      // Before the first byte too: these are HTTP errors, not stream failures, and must not invent reasons.
      'http_500',
      'reset_after:0',
      'malformed_after:0',
    ];
    await Promise.all(
      faults.flatMap((fault) =>
        (['chat_completions', 'completions', 'responses'] as const).map((route) =>
          post(
            `${gateway.url}${route === 'chat_completions' ? '/v1/chat/completions' : route === 'completions' ? '/v1/completions' : '/v1/responses'}`,
            route === 'responses'
              ? { model: 'mock-model', input: 'x', stream: true, max_output_tokens: 8 }
              : route === 'completions'
                ? { model: 'mock-model', prompt: 'x', stream: true, max_tokens: 8 }
                : chatBody({ stream: true, max_tokens: 8 }),
            { 'x-mock-fault': fault },
          ),
        ),
      ),
    );
    const text = await (await fetch(`${gateway.url}/metrics`)).text();
    const reasons = new Set<string>();
    for (const line of text.split('\n')) {
      if (line.startsWith('#')) continue;
      const m = /[{,]reason="([^"]*)"/.exec(line);
      if (m) reasons.add(m[1]!);
    }
    const failures = samples(text, 'sluice_stream_failures_total');
    // Not vacuous: the run produced failures under several reasons, on all three APIs.
    expect(new Set(failures.map((s) => s.labels.api))).toEqual(
      new Set(['chat_completions', 'completions', 'responses']),
    );
    expect(reasons.size).toBeGreaterThanOrEqual(4);
    for (const reason of reasons) expect(STREAM_FAILURE_REASONS as readonly string[]).toContain(reason);
    for (const s of failures) expect(STREAM_FAILURE_REASONS as readonly string[]).toContain(s.labels.reason);
  });
});
