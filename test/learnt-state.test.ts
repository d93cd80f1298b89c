import { describe, expect, it } from 'vitest';
import { DecayingMax } from '../src/routing/decaying-max.js';
import { ScorerPolicy } from '../src/routing/index.js';
import type { Candidate, CandidateReading } from '../src/routing/types.js';
import { perTest, post } from './helpers/gateway.js';

/**
 * Issue 49, part 6: state that only grew. One policy per model name was kept for ever (discovered
 * models and LoRA adapters churn), and the learnt batch size and most-ever-running count only
 * went up, so an engine restarted smaller under the same id kept phantom room.
 */
describe('learnt routing state is bounded and decays (issue 49)', () => {
  it('DecayingMax forgets a value between one and two windows after it was last seen', () => {
    const max = new DecayingMax(1_000);
    max.note(8, 0);
    max.note(3, 500);
    expect(max.get(999)).toBe(8);
    expect(max.get(1_500)).toBe(8); // the window before still counts
    max.note(3, 1_600);
    expect(max.get(2_000)).toBe(3); // two windows on: only what was seen since
    expect(max.get(10_000)).toBeUndefined();
  });

  it('an engine restarted with a smaller batch under the same id gets back the room it has, not the one it had', () => {
    const policy = new ScorerPolicy({ saturation: { maxWaiting: 1 } });
    let load = 0;
    let reading: CandidateReading = {
      state: 'fresh',
      // Requests wait with 8 running: a batch of 8, learnt.
      signals: { waiting: 1, running: 8, kvCacheUsage: 0.1, lora: undefined, scrapedAt: 0 },
    };
    const c: Candidate = {
      id: 'w',
      maxBatch: 2,
      get load() {
        return load;
      },
      signals: () => reading,
    };
    const goBeforeHeld = (scrapedAt: number) => {
      reading = {
        state: 'fresh',
        signals: { waiting: 0, running: 0, kvCacheUsage: 0.1, lora: undefined, scrapedAt },
      };
      load = 0;
      let sent = 0;
      while (!policy.saturated([c], {}) && sent < 1_000) {
        sent++;
        load++;
      }
      return sent;
    };
    expect(policy.saturated([c], {})).toBe(true);
    // Restarted, empty: the learnt batch of 8 still counts a minute later...
    expect(goBeforeHeld(60_000)).toBe(8 + 1);
    // ...and is gone ten minutes later: the configured batch of 2 again.
    expect(goBeforeHeld(11 * 60_000)).toBe(2 + 1);
  });
});

describe('one routing policy per model served, not per name ever seen (issue 49)', () => {
  const fx = perTest();

  it('a model no worker serves any more loses its policy', async () => {
    const [a] = await fx.mocks(1, { models: ['model-a'] });
    const [b] = await fx.mocks(1, { models: ['model-b'] });
    const gw = await fx.gateway({
      workers: [
        { url: a!.url, id: 'a', models: ['model-a'] },
        { url: b!.url, id: 'b', models: ['model-b'] },
      ],
    });
    const ask = (model: string) =>
      post(`${gw.url}/v1/chat/completions`, {
        model,
        max_tokens: 1,
        messages: [{ role: 'user', content: 'hi' }],
      });
    expect((await ask('model-a')).status).toBe(200);
    expect((await ask('model-b')).status).toBe(200);
    expect(gw.context.router.policyCount).toBe(2);
    gw.context.registry.remove('b');
    expect(gw.context.router.policyCount).toBe(1);
    expect((await ask('model-a')).status).toBe(200);
  });
});
