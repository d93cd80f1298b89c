import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { ModelSettings } from '../src/config/model-settings.js';
import { sequence } from '../src/mock/generate.js';
import { BACKUP, fallbackFixture, PRIMARY, TOKENS } from './helpers/fallback-fixture.js';
import { eventually, metric, metricOrZero, post } from './helpers/gateway.js';

/**
 * Fallback across models (README "Fallbacks"), the faults before and around the first byte: each
 * case asserts what the client got (the whole answer, or the typed error where nothing can rescue
 * it, or the refusal as the engine gave it), how many attempts each model saw, and how long it
 * took as a ratio to the configured timeouts (the fixture: test/helpers/fallback-fixture.ts).
 */
describe('fallbacks across models', () => {
  const { setup, chat, streamed, fallbacks } = fallbackFixture();

  it('429 with a short Retry-After: the same route is tried again after it, and answers', async () => {
    const { primaryWorker, backupWorker, gateway, attempts, waits } = await setup({
      retry: { maxRetryAfterMs: 5_000 },
    });
    primaryWorker.setFault('http_429:1,once', PRIMARY);
    const started = performance.now();
    const res = await chat(gateway.url);
    const elapsed = performance.now() - started;
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-model')).toBe(PRIMARY);
    expect(attempts(primaryWorker)).toBe(2);
    expect(attempts(backupWorker)).toBe(0);
    // It waited what the engine asked (1 s), not the short backoff.
    expect(waits).toEqual([1_000]);
    expect(elapsed).toBeGreaterThanOrEqual(1_000 * 0.95);
  });

  it('429 with a Retry-After past the bound: the next model at once, no burst on the refusing route', async () => {
    const { primaryWorker, backupWorker, gateway, attempts, waits } = await setup({
      retry: { maxRetryAfterMs: 500 },
    });
    primaryWorker.setFault('http_429:30', PRIMARY);
    const res = await chat(gateway.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-model')).toBe(BACKUP);
    expect((res.json() as { model: string }).model).toBe(BACKUP);
    expect(attempts(primaryWorker)).toBe(1);
    expect(attempts(backupWorker)).toBe(1);
    // Not the 30 s asked for, nor the bound, nor a backoff: no wait at all.
    expect(waits).toEqual([]);
    expect(await fallbacks(gateway.url, 'rate_limited')).toBe(1);
  });

  it('429 forever (a Retry-After within the bound): retries up to retry.maxAttempts, then the next model', async () => {
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({
      retry: { maxAttempts: 3, maxRetryAfterMs: 5_000 },
    });
    primaryWorker.setFault('http_429:1', PRIMARY);
    const res = await chat(gateway.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-model')).toBe(BACKUP);
    expect(attempts(primaryWorker)).toBe(3);
    expect(attempts(backupWorker)).toBe(1);
    expect(await fallbacks(gateway.url, 'rate_limited')).toBe(1);
  });

  it('500 once: retried on the same model, which answers; no fallback', async () => {
    const { primaryWorker, backupWorker, gateway, attempts } = await setup();
    primaryWorker.setFault('http_500,once', PRIMARY);
    const res = await chat(gateway.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-model')).toBe(PRIMARY);
    expect(attempts(primaryWorker)).toBe(2);
    expect(attempts(backupWorker)).toBe(0);
    expect(await fallbacks(gateway.url, 'upstream_error')).toBe(0);
  });

  for (const [fault, reason] of [
    ['http_503', 'unavailable'],
    ['reset_headers', 'unreachable'],
  ] as const) {
    it(`${fault} forever: the next model answers the whole request`, async () => {
      const { primaryWorker, backupWorker, gateway, attempts } = await setup({ retry: { maxAttempts: 2 } });
      primaryWorker.setFault(fault, PRIMARY);
      const res = await chat(gateway.url, { stream: true });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-sluice-model')).toBe(BACKUP);
      const got = streamed(res.text);
      expect(got.text).toBe(sequence(TOKENS));
      expect(got.done).toBe(true);
      expect(got.chunks.every((c) => c.model === BACKUP)).toBe(true);
      expect(attempts(primaryWorker)).toBe(2);
      expect(attempts(backupWorker)).toBe(1);
      expect(await fallbacks(gateway.url, reason)).toBe(1);
    });
  }

  it('no answer at all: left after timeouts.headersMs, not tried again, the next model answers', async () => {
    // undici fires a headers timeout on a timer of half a second's resolution: a bound of a second
    // keeps the ratio below meaningful.
    const headersMs = 1_000;
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({
      timeouts: { headersMs },
      retry: { maxAttempts: 3 },
    });
    // What the fallback alone takes, measured first: the baseline of the time below.
    const baselineStarted = performance.now();
    await chat(gateway.url, { stream: true }, BACKUP);
    const baseline = performance.now() - baselineStarted;
    primaryWorker.setFault('delay_headers:600000', PRIMARY);
    const started = performance.now();
    const res = await chat(gateway.url, { stream: true });
    const elapsed = performance.now() - started;
    expect(res.status).toBe(200);
    expect(streamed(res.text).text).toBe(sequence(TOKENS));
    expect(attempts(primaryWorker)).toBe(1);
    expect(attempts(backupWorker)).toBe(2);
    // One headers timeout and the fallback's own time, not three timeouts (a retry on the silent route).
    expect(elapsed).toBeGreaterThanOrEqual(headersMs * 0.95);
    expect(elapsed - baseline).toBeLessThan(headersMs * 2);
    expect(await fallbacks(gateway.url, 'timeout')).toBe(1);
  });

  it('first token after 20 s: left after timeouts.firstTokenMs, not the idle clock, the next model answers', async () => {
    const firstTokenMs = 300;
    const idleMs = 20 * firstTokenMs;
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({
      timeouts: { firstTokenMs, idleMs },
    });
    primaryWorker.setFault('delay_first:20000', PRIMARY);
    const started = performance.now();
    const res = await chat(gateway.url, { stream: true });
    const elapsed = performance.now() - started;
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-model')).toBe(BACKUP);
    expect(streamed(res.text).text).toBe(sequence(TOKENS));
    expect(attempts(primaryWorker)).toBe(1);
    expect(attempts(backupWorker)).toBe(1);
    // The primary's request was let go (not left running beside the fallback's).
    expect(primaryWorker.stats.aborted).toBe(1);
    // Which clock left it: the first token's, not the idle one twenty times longer (nor the 20 s).
    expect(elapsed).toBeGreaterThanOrEqual(firstTokenMs * 0.95);
    expect(elapsed / idleMs).toBeLessThan(0.5);
  });

  it('a first token that never comes, without timeouts.firstTokenMs: left in time for the next model to answer within the budget', async () => {
    // The default bound is 30 s, at most idleMs and half the budget: never the 60 s idle clock.
    const defaults = new ModelSettings(parseConfig({}));
    expect(defaults.timeouts(PRIMARY).firstTokenMs).toBe(30_000);
    expect(
      new ModelSettings(parseConfig({ timeouts: { idleMs: 10_000 } })).timeouts(PRIMARY).firstTokenMs,
    ).toBe(10_000);
    const deadlineMs = 2_000;
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({ timeouts: { deadlineMs } });
    primaryWorker.setFault('delay_first:600000', PRIMARY);
    const res = await chat(gateway.url, { stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-model')).toBe(BACKUP);
    const got = streamed(res.text);
    expect(got.text).toBe(sequence(TOKENS));
    expect(got.done).toBe(true);
    expect(attempts(primaryWorker)).toBe(1);
    expect(attempts(backupWorker)).toBe(1);
    expect(await fallbacks(gateway.url, 'timeout')).toBe(1);
  });

  for (const [fault, what] of [
    ['reset_after:4', 'cut'],
    ['stall_after:4', 'stalled'],
    ['malformed_after:4', 'broken by a malformed chunk'],
  ] as const) {
    it(`a stream ${what} mid-answer goes on on the next model from the text so far: nothing lost, nothing repeated`, async () => {
      const { primaryWorker, backupWorker, gateway, attempts } = await setup({ timeouts: { idleMs: 300 } });
      primaryWorker.setFault(fault, PRIMARY);
      const res = await chat(gateway.url, { stream: true });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-sluice-model')).toBe(PRIMARY);
      const got = streamed(res.text);
      expect(got.error).toBeUndefined();
      expect(got.done).toBe(true);
      expect(got.text).toBe(sequence(TOKENS));
      // Who answered which part: the chunks name the model that made them.
      const models = got.chunks.filter((c) => c.choices?.[0]?.delta?.content).map((c) => c.model);
      expect(models.slice(0, 4)).toEqual([PRIMARY, PRIMARY, PRIMARY, PRIMARY]);
      expect(models.at(-1)).toBe(BACKUP);
      expect(attempts(primaryWorker)).toBe(1);
      expect(attempts(backupWorker)).toBe(1);
      // The continuation carried the text shown, as a prefill.
      const asked = backupWorker.stats.lastBodies.at(-1) as { messages: { role: string; content: string }[] };
      expect(asked.messages.at(-1)).toEqual({ role: 'assistant', content: sequence(4) });
      expect(await fallbacks(gateway.url, 'stream_cut')).toBe(1);
    });
  }

  it('no [DONE] after a finish: the answer is whole from the primary; nothing to rescue', async () => {
    const { primaryWorker, backupWorker, gateway, attempts } = await setup();
    primaryWorker.setFault('no_done', PRIMARY);
    const res = await chat(gateway.url, { stream: true });
    const got = streamed(res.text);
    expect(got.text).toBe(sequence(TOKENS));
    expect(got.done).toBe(true);
    expect(attempts(primaryWorker)).toBe(1);
    expect(attempts(backupWorker)).toBe(0);
  });

  it('context length exceeded: the next model at once, without a retry of the same prompt', async () => {
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({ retry: { maxAttempts: 3 } });
    primaryWorker.setFault('context_length', PRIMARY);
    const res = await chat(gateway.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-model')).toBe(BACKUP);
    expect(attempts(primaryWorker)).toBe(1);
    expect(attempts(backupWorker)).toBe(1);
    expect(await fallbacks(gateway.url, 'context_length')).toBe(1);
    // Without a fallback able to take it, the client is told in a stable code.
    backupWorker.setFault('context_length', BACKUP);
    const refused = await chat(gateway.url);
    expect(refused.status).toBe(400);
    expect((refused.json() as { error: { code: string } }).error.code).toBe('context_length_exceeded');
  });

  it('a content-policy refusal reaches the client as the engine gave it, and never moves on', async () => {
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({ retry: { maxAttempts: 3 } });
    primaryWorker.setFault('content_policy', PRIMARY);
    const res = await chat(gateway.url);
    expect(res.status).toBe(400);
    const body = res.json() as { error: { message: string; type: string } };
    expect(body.error.type).toBe('invalid_request_error');
    expect(body.error.message).toContain('safety system');
    expect(attempts(primaryWorker)).toBe(1);
    expect(attempts(backupWorker)).toBe(0);
  });

  it('a primary down then back: while its circuit is open requests go straight to the fallback; after a probe it serves again', async () => {
    const cooldownMs = 800;
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({
      breaker: { failureThreshold: 2, cooldownMs },
      retry: { maxAttempts: 1 },
      health: { intervalMs: 60_000 },
    });
    primaryWorker.setFault('http_500', PRIMARY);
    for (let i = 0; i < 2; i++) expect((await chat(gateway.url)).headers.get('x-sluice-model')).toBe(BACKUP);
    const primarySeen = attempts(primaryWorker);
    // Open: no attempt on the primary, no panic mode; the fallback answers at once.
    for (let i = 0; i < 3; i++) expect((await chat(gateway.url)).headers.get('x-sluice-model')).toBe(BACKUP);
    expect(attempts(primaryWorker)).toBe(primarySeen);
    expect(await metricOrZero(gateway.url, 'sluice_breaker_panic_total', { model: PRIMARY })).toBe(0);
    // Back: within one probe interval traffic returns to the primary.
    primaryWorker.setFault(undefined, PRIMARY);
    const back = performance.now();
    let answeredBy: string | null = BACKUP;
    await eventually(async () => {
      answeredBy = (await chat(gateway.url)).headers.get('x-sluice-model');
      return answeredBy === PRIMARY;
    }, 10_000);
    expect(performance.now() - back).toBeLessThan(cooldownMs * 4);
    expect(attempts(backupWorker)).toBeGreaterThanOrEqual(5);
  });

  it("a request's own fallbacks: used instead of the configured ones, checked, and never sent to an engine", async () => {
    const { primaryWorker, backupWorker, gateway } = await setup({
      models: { [PRIMARY]: { fallbacks: [] } },
    });
    primaryWorker.setFault('http_503', PRIMARY);
    const res = await chat(gateway.url, { fallbacks: [BACKUP] });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-sluice-model')).toBe(BACKUP);
    for (const body of [...primaryWorker.stats.lastBodies, ...backupWorker.stats.lastBodies])
      expect(body).not.toHaveProperty('fallbacks');
    const unknown = await chat(gateway.url, { fallbacks: ['nobody-serves-this'] });
    expect(unknown.status).toBe(404);
    expect((unknown.json() as { error: { code: string } }).error.code).toBe('model_not_found');
  });

  it('accounting: the answering model is named, its usage charged to the key, every fallback counted', async () => {
    const { primaryWorker, gateway } = await setup({ auth: { adminKey: 'admin-key-for-fallbacks-0123' } });
    const admin = { authorization: 'Bearer admin-key-for-fallbacks-0123' };
    const created = await post(`${gateway.url}/admin/keys`, { models: [PRIMARY] }, admin);
    const { key, id } = created.json() as { key: string; id: string };
    primaryWorker.setFault('http_503', PRIMARY);
    // A key may only fall back to models it may use.
    const notAllowed = await post(
      `${gateway.url}/v1/chat/completions`,
      {
        model: PRIMARY,
        max_tokens: TOKENS,
        messages: [{ role: 'user', content: 'hi' }],
        fallbacks: [BACKUP],
      },
      { authorization: `Bearer ${key}` },
    );
    expect(notAllowed.status).toBe(403);
    const wide = (await post(`${gateway.url}/admin/keys`, {}, admin).then((r) => r.json())) as {
      key: string;
      id: string;
    };
    const res = await post(
      `${gateway.url}/v1/chat/completions`,
      { model: PRIMARY, max_tokens: TOKENS, messages: [{ role: 'user', content: 'hi' }] },
      { authorization: `Bearer ${wide.key}` },
    );
    expect(res.status).toBe(200);
    const usage = (res.json() as { usage: { completion_tokens: number } }).usage;
    expect(res.headers.get('x-sluice-model')).toBe(BACKUP);
    await eventually(async () => {
      const used = (await (
        await fetch(`${gateway.url}/admin/keys/${wide.id}/usage`, { headers: admin })
      ).json()) as {
        completion_tokens: number;
      };
      return used.completion_tokens === usage.completion_tokens;
    });
    expect(
      await metric(gateway.url, 'sluice_fallbacks_total', {
        from: PRIMARY,
        to: BACKUP,
        reason: 'unavailable',
      }),
    ).toBe(1);
    expect(id).toBeTypeOf('string');
  });

  it('one budget: a chain whose every model never answers ends at timeouts.deadlineMs, typed', async () => {
    const deadlineMs = 1_500;
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({
      timeouts: { deadlineMs, headersMs: 60_000 },
      retry: { maxAttempts: 1 },
    });
    // What a request that is answered at once takes here, now: the baseline of the time below.
    const baselineStarted = performance.now();
    expect((await chat(gateway.url, { stream: true }, BACKUP)).status).toBe(200);
    const baseline = performance.now() - baselineStarted;
    // The primary spends four fifths of the budget before its 503; the fallback never answers.
    primaryWorker.setFault('delay_headers:1200,http_503', PRIMARY);
    backupWorker.setFault('delay_headers:600000', BACKUP);
    const started = performance.now();
    const res = await chat(gateway.url, { stream: true });
    const elapsed = performance.now() - started;
    expect([attempts(primaryWorker), attempts(backupWorker)]).toEqual([1, 2]);
    // The budget's own end answered (not a route's headers timeout, 60 s, nor a model's own budget).
    expect(res.status).toBe(504);
    expect((res.json() as { error: { code: string } }).error.code).toBe('stream_deadline_exceeded');
    // One budget for the chain: about 1× deadlineMs; a budget of its own for the fallback would be
    // 1.8× (1.2 s on the primary, then 1.5 s).
    // (A timer is never early: the lower bound needs no baseline; what the way to the gateway
    // and back adds, the baseline, is taken off the upper one.)
    expect(elapsed / deadlineMs).toBeGreaterThanOrEqual(0.9);
    expect((elapsed - baseline) / deadlineMs).toBeLessThan(1.4);
  });
});
