import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { ModelSettings } from '../src/config/model-settings.js';
import { SCORER_DEFAULTS } from '../src/routing/scorer.js';

describe('the scorer and flow control settings', () => {
  it('resolve a model’s weights and saturation over routing.scorer’s, field by field', () => {
    const config = parseConfig({
      routing: { policy: 'scorer', scorer: { weights: { prefix: 7 }, saturation: { maxWaiting: 3 } } },
      models: { m: { routing: { scorer: { weights: { queue: 9 }, saturation: { defaultBatch: 64 } } } } },
    });
    const settings = new ModelSettings(config);
    expect(settings.scorer('m')).toEqual({
      weights: { ...SCORER_DEFAULTS.weights, prefix: 7, queue: 9 },
      saturation: { ...SCORER_DEFAULTS.saturation, maxWaiting: 3, defaultBatch: 64 },
      heavy: SCORER_DEFAULTS.heavy,
    });
    expect(settings.scorer('other').weights).toEqual({ ...SCORER_DEFAULTS.weights, prefix: 7 });
    expect(settings.scorer('other').saturation.defaultBatch).toBe(256);
    expect(config.routing.scorer.affinity).toMatchObject({ blockChars: 128, share: true });
  });

  it('refuse the knobs that gained nothing and are gone (maxPendingPrefill, prefixChars), naming them', () => {
    expect(() => parseConfig({ routing: { scorer: { saturation: { maxPendingPrefill: 1000 } } } })).toThrow(
      /maxPendingPrefill/,
    );
    expect(() => parseConfig({ routing: { scorer: { prefixChars: 4000 } } })).toThrow(/prefixChars/);
  });

  it('resolve how a heavy tenant is kept from the others’ workers per model, and refuse a share out of (0, 1]', () => {
    const config = parseConfig({
      routing: { policy: 'scorer', scorer: { heavy: { prefillShare: 0.75 } } },
      models: { m: { routing: { scorer: { heavy: { isolate: false } } } } },
    });
    const settings = new ModelSettings(config);
    expect(settings.scorer('m').heavy).toEqual({
      ...SCORER_DEFAULTS.heavy,
      prefillShare: 0.75,
      isolate: false,
    });
    expect(settings.scorer('other').heavy).toEqual({ ...SCORER_DEFAULTS.heavy, prefillShare: 0.75 });
    expect(new ModelSettings(parseConfig({})).scorer('x').heavy).toEqual({
      isolate: true,
      prefillShare: 0.5,
      longPrefillChars: 2048,
      turnMs: 100,
    });
    for (const prefillShare of [0, 1.5])
      expect(() => parseConfig({ routing: { scorer: { heavy: { prefillShare } } } })).toThrow(/prefillShare/);
    for (const turnMs of [-1, 2.5])
      expect(() => parseConfig({ routing: { scorer: { heavy: { turnMs } } } })).toThrow(/turnMs/);
  });

  it('refuse a negative weight, a saturation past 1, and classes that do not exist', () => {
    expect(() => parseConfig({ routing: { scorer: { weights: { queue: -1 } } } })).toThrow(/weights\.queue/);
    expect(() => parseConfig({ routing: { scorer: { saturation: { maxKvCacheUsage: 1.5 } } } })).toThrow(
      /maxKvCacheUsage/,
    );
    expect(() => parseConfig({ flow: { defaultClass: 'urgent' } })).toThrow(/not one of flow\.classes/);
    expect(() => parseConfig({ flow: { keys: { k: { priority: 'gold' } } } })).toThrow(
      /flow\.keys\.k\.priority/,
    );
    expect(() => parseConfig({ flow: { classes: ['a', 'a'], defaultClass: 'a' } })).toThrow(/twice/);
    expect(parseConfig({}).flow).toMatchObject({
      enabled: true,
      classes: ['high', 'normal', 'low'],
      maxWaitMs: 30_000,
    });
  });
});
