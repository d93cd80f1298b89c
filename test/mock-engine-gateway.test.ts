import { describe, expect, it } from 'vitest';
import { chatTokens, textTokens } from '../src/mock/engine-tokens.js';
import { perTest, post, samples } from './helpers/gateway.js';

/**
 * End to end: a gateway in front of mock workers with the engine model. The engines' prefix
 * caches see what the routing policy did: a conversation kept on one engine hits every earlier
 * turn; one spread over engines hits only what each engine saw.
 */
describe('the engine model behind a gateway', () => {
  const fx = perTest();
  const BLOCK = 16;

  it('cache_aware keeps a conversation on one engine, whose prefix cache holds every earlier turn; round_robin spreads it and hits less', async () => {
    const workers = await fx.mocks(2, {
      models: ['sticky', 'spread'],
      engine: { blockSize: BLOCK, decodeTokensPerSecond: 500, prefillTokensPerSecond: 100_000 },
    });
    const gateway = await fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `engine-${i}` })),
      routing: { policy: 'round_robin' },
      models: { sticky: { policy: 'cache_aware' } },
    });
    const hitsSoFar = async () => {
      let total = 0;
      for (const w of workers) {
        const text = await (await fetch(`${w.url}/metrics`)).text();
        total += samples(text, 'vllm:prefix_cache_hits_total')[0]!.value;
      }
      return total;
    };

    /** Four turns of one conversation: the engine of each, the prefix-cache hits of each, and the tokens each turn leaves cached. */
    async function converse(model: string, system: string) {
      const messages: { role: string; content: string }[] = [{ role: 'system', content: system }];
      const turns: { worker: string; hits: number; cachedAfter: number }[] = [];
      for (let turn = 1; turn <= 4; turn++) {
        messages.push({
          role: 'user',
          content: `Question ${turn}: what happens next, and why does it matter here?`,
        });
        const before = await hitsSoFar();
        const res = await post(`${gateway.url}/v1/chat/completions`, { model, messages, max_tokens: 12 });
        expect(res.status).toBe(200);
        const answer = (res.json() as { choices: { message: { content: string } }[] }).choices[0]!.message
          .content;
        const sequence = [...chatTokens(messages), ...textTokens(answer)];
        turns.push({
          worker: res.headers.get('x-sluice-worker')!,
          hits: (await hitsSoFar()) - before,
          cachedAfter: Math.floor(sequence.length / BLOCK) * BLOCK,
        });
        messages.push({ role: 'assistant', content: answer });
      }
      return turns;
    }

    const sticky = await converse('sticky', 'You are the harbour master of a small port. '.repeat(30));
    expect(new Set(sticky.map((t) => t.worker)).size).toBe(1);
    // Each turn hits the whole of the previous one: its prompt and its answer, in full blocks.
    expect(sticky.map((t) => t.hits)).toEqual([
      0,
      sticky[0]!.cachedAfter,
      sticky[1]!.cachedAfter,
      sticky[2]!.cachedAfter,
    ]);

    const spread = await converse('spread', 'You are the keeper of a lighthouse on a cliff. '.repeat(30));
    expect(spread[0]!.worker).not.toBe(spread[1]!.worker);
    expect(spread[2]!.worker).toBe(spread[0]!.worker);
    expect(spread[3]!.worker).toBe(spread[1]!.worker);
    // Each engine holds only the turns it served: the second turn misses, the later ones hit two turns back.
    expect(spread.map((t) => t.hits)).toEqual([0, 0, spread[0]!.cachedAfter, spread[1]!.cachedAfter]);
    const total = (turns: { hits: number }[]) => turns.reduce((sum, t) => sum + t.hits, 0);
    expect(total(spread)).toBeLessThan(total(sticky));
  });
});
