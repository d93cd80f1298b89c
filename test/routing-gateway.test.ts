import { describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import { chatBody, perTest, post } from './helpers/gateway.js';

/** Each policy, chosen per model, seen through the gateway (the x-sluice-worker header). */
describe('routing policies in the gateway', () => {
  const fx = perTest();

  async function servedBy(gw: Gateway, body: unknown, headers: Record<string, string> = {}): Promise<string> {
    const res = await post(`${gw.url}/v1/chat/completions`, body, headers);
    expect(res.status).toBe(200);
    return res.headers.get('x-sluice-worker')!;
  }

  it('consistent_hash keeps a session on one worker; policies are chosen per model', async () => {
    const workers = await fx.mocks(3, { models: ['a', 'b'] });
    const gateway = await fx.gateway({
      workers: workers.map((w) => ({ url: w.url })),
      routing: { policy: 'round_robin' },
      models: { a: { policy: 'consistent_hash' } },
    });
    const sessions = new Map<string, Set<string>>();
    for (let i = 0; i < 30; i++) {
      const session = `s${i % 10}`;
      const worker = await servedBy(gateway, chatBody({ model: 'a', max_tokens: 1 }), {
        'x-session-id': session,
      });
      if (!sessions.has(session)) sessions.set(session, new Set());
      sessions.get(session)!.add(worker);
    }
    for (const set of sessions.values()) expect(set.size).toBe(1);
    const used = new Set([...sessions.values()].flatMap((s) => [...s]));
    expect(used.size).toBeGreaterThan(1);
    // Model b is round robin: consecutive requests of one session rotate.
    const b = new Set<string>();
    for (let i = 0; i < 3; i++)
      b.add(await servedBy(gateway, chatBody({ model: 'b', max_tokens: 1 }), { 'x-session-id': 's1' }));
    expect(b.size).toBe(3);
  });

  it('cache_aware sends prompts with a shared long prefix to the same worker', async () => {
    const workers = await fx.mocks(3);
    const gateway = await fx.gateway({
      workers: workers.map((w) => ({ url: w.url })),
      routing: { policy: 'cache_aware' },
    });
    const system = 'You are a careful assistant. '.repeat(40);
    const first = await servedBy(
      gateway,
      chatBody({
        max_tokens: 1,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: 'q1' },
        ],
      }),
    );
    for (let i = 2; i < 8; i++) {
      const worker = await servedBy(
        gateway,
        chatBody({
          max_tokens: 1,
          messages: [
            { role: 'system', content: system },
            { role: 'user', content: `q${i}` },
          ],
        }),
      );
      expect(worker).toBe(first);
    }
  });

  it('least_outstanding avoids the busy worker', async () => {
    const workers = await fx.mocks(2, { tokensPerSecond: 20 });
    const gateway = await fx.gateway({
      workers: workers.map((w) => ({ url: w.url })),
      routing: { policy: 'least_outstanding' },
    });
    // Hold one long stream open, then every short request goes to the other worker.
    const controller = new AbortController();
    const long = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 200 })),
      signal: controller.signal,
    });
    const busy = long.headers.get('x-sluice-worker');
    for (let i = 0; i < 4; i++) {
      expect(await servedBy(gateway, chatBody({ max_tokens: 1 }))).not.toBe(busy);
    }
    controller.abort();
  });

  for (const policy of ['random', 'power_of_two'] as const) {
    it(`${policy} uses every worker`, async () => {
      const workers = await fx.mocks(3);
      const gateway = await fx.gateway({
        workers: workers.map((w) => ({ url: w.url })),
        routing: { policy },
      });
      const seen = new Set<string>();
      for (let i = 0; i < 40; i++) seen.add(await servedBy(gateway, chatBody({ max_tokens: 1 })));
      expect(seen.size).toBe(3);
    });
  }
});
