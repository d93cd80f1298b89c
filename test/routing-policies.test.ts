import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../src/engine/prng.js';
import {
  CacheAwarePolicy,
  type Candidate,
  createPolicy,
  LeastOutstandingPolicy,
  POLICY_NAMES,
  PowerOfTwoPolicy,
  RandomPolicy,
  RoundRobinPolicy,
} from '../src/routing/index.js';

function workers(loads: readonly number[]): Candidate[] {
  return loads.map((load, i) => ({ id: `w${i}`, load }));
}

function randomText(rand: () => number, length: number): string {
  let s = '';
  for (let i = 0; i < length; i++) s += String.fromCharCode(97 + Math.floor(rand() * 26));
  return s;
}

function countPicks(pick: () => Candidate, times: number): Map<string, number> {
  const counts = new Map<string, number>();
  for (let i = 0; i < times; i++) {
    const id = pick().id;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

describe('createPolicy', () => {
  it('builds every named policy', () => {
    for (const name of POLICY_NAMES) expect(createPolicy(name).name).toBe(name);
  });

  it('passes the random source on', () => {
    const policy = createPolicy('random', { random: () => 0.99 });
    expect(policy.select(workers([0, 0, 0]), {}).id).toBe('w2');
  });
});

describe('round_robin', () => {
  it('gives exactly equal counts, in order', () => {
    const policy = new RoundRobinPolicy();
    const candidates = workers([5, 0, 9, 1]);
    expect([0, 1, 2, 3, 4].map(() => policy.select(candidates, {}).id)).toEqual([
      'w0',
      'w1',
      'w2',
      'w3',
      'w0',
    ]);
    const fresh = new RoundRobinPolicy();
    const counts = countPicks(() => fresh.select(candidates, {}), 4000);
    expect([...counts.values()]).toEqual([1000, 1000, 1000, 1000]);
  });
});

describe('random', () => {
  it('is within 3% of uniform over 30k picks', () => {
    const policy = new RandomPolicy(mulberry32(1));
    const candidates = workers([0, 0, 0]);
    const counts = countPicks(() => policy.select(candidates, {}), 30_000);
    expect(counts.size).toBe(3);
    for (const n of counts.values()) expect(Math.abs(n - 10_000)).toBeLessThan(300);
  });

  it('uses the injected source', () => {
    expect(new RandomPolicy(() => 0).select(workers([0, 0, 0]), {}).id).toBe('w0');
    expect(new RandomPolicy(() => 0.5).select(workers([0, 0, 0]), {}).id).toBe('w1');
  });
});

describe('least_outstanding', () => {
  it('always picks a minimum-load candidate', () => {
    const rand = mulberry32(2);
    const policy = new LeastOutstandingPolicy();
    for (let round = 0; round < 1000; round++) {
      const candidates = workers(Array.from({ length: 5 }, () => Math.floor(rand() * 6)));
      const min = Math.min(...candidates.map((c) => c.load));
      expect(policy.select(candidates, {}).load).toBe(min);
    }
  });

  it('spreads ties instead of always taking the first', () => {
    const policy = new LeastOutstandingPolicy();
    const counts = countPicks(() => policy.select(workers([1, 4, 1, 1]), {}), 300);
    expect(counts.get('w1')).toBeUndefined();
    expect([counts.get('w0'), counts.get('w2'), counts.get('w3')]).toEqual([100, 100, 100]);
  });
});

describe('power_of_two', () => {
  it('with two candidates always takes the less loaded, so the two draws are distinct', () => {
    const policy = new PowerOfTwoPolicy(mulberry32(3));
    for (let i = 0; i < 1000; i++) expect(policy.select(workers([7, 2]), {}).id).toBe('w1');
  });

  it('never picks the most loaded and favours the least loaded', () => {
    const policy = new PowerOfTwoPolicy(mulberry32(4));
    const candidates = workers([30, 10, 40, 20]);
    const counts = countPicks(() => policy.select(candidates, {}), 20_000);
    expect(counts.get('w2')).toBeUndefined();
    // The least loaded wins whenever it is drawn: 2/n of the time, against 1/n for uniform.
    expect(counts.get('w1')! / 20_000).toBeGreaterThan(0.45);
    expect(counts.get('w3')).toBeGreaterThan(0);
  });
});

describe('cache_aware', () => {
  const system = randomText(mulberry32(5), 2000);

  it('sends prompts that share a long prefix to the same worker', () => {
    const policy = new CacheAwarePolicy();
    const first = policy.select(workers([0, 0, 0]), { text: `${system} question 0` });
    for (let i = 1; i < 50; i++) {
      // The holder is busier than the rest, but not enough to count as imbalanced.
      const loads = [0, 0, 0].map((_, j) => (`w${j}` === first.id ? 20 : 0));
      expect(policy.select(workers(loads), { text: `${system} question ${i}` }).id).toBe(first.id);
    }
  });

  it('routes unrelated prompts by load', () => {
    const rand = mulberry32(6);
    const policy = new CacheAwarePolicy();
    expect(policy.select(workers([3, 1, 2]), { text: randomText(rand, 500) }).id).toBe('w1');
    const loads = [0, 0, 0];
    for (let i = 0; i < 30; i++) {
      const chosen = policy.select(workers(loads), { text: randomText(rand, 500) });
      loads[Number(chosen.id.slice(1))]! += 1;
    }
    expect(loads).toEqual([10, 10, 10]);
  });

  it('routes by load when the match is below the threshold', () => {
    const policy = new CacheAwarePolicy({ matchThreshold: 0.5 });
    policy.select(workers([0, 5]), { text: 'a'.repeat(100) });
    expect(policy.select(workers([5, 0]), { text: `${'a'.repeat(49)}${'b'.repeat(51)}` }).id).toBe('w1');
    expect(policy.select(workers([5, 0]), { text: `${'a'.repeat(51)}${'b'.repeat(49)}` }).id).toBe('w0');
  });

  it('honours the imbalance rule: both the absolute and the relative gap must be exceeded', () => {
    // w0 holds the prefix; each case asks a fresh policy whether w0 (loaded) or w1 wins.
    const route = (holderLoad: number, otherLoad: number): string => {
      const policy = new CacheAwarePolicy();
      policy.select([{ id: 'w0', load: 0 }], { text: system });
      return policy.select(workers([holderLoad, otherLoad]), { text: `${system}?` }).id;
    };
    // Gap 90 > 32 and 100 > 1.5 * 10: imbalanced, least loaded wins.
    expect(route(100, 10)).toBe('w1');
    // Gap 50 > 32 but 200 <= 1.5 * 150: balanced enough, the prefix holder wins.
    expect(route(200, 150)).toBe('w0');
    // 40 > 1.5 * 10 but gap 30 <= 32: also balanced enough.
    expect(route(40, 10)).toBe('w0');
    // Both exceeded with a zero minimum.
    expect(route(33, 0)).toBe('w1');
  });

  it('only picks among the candidates, preferring prefix holders that are candidates', () => {
    const policy = new CacheAwarePolicy();
    policy.select([{ id: 'w0', load: 0 }], { text: system });
    policy.select([{ id: 'w1', load: 0 }], { text: system });
    const among = [
      { id: 'w1', load: 10 },
      { id: 'w2', load: 0 },
    ];
    expect(policy.select(among, { text: `${system} x` }).id).toBe('w1');
    const neither = [
      { id: 'w2', load: 3 },
      { id: 'w3', load: 1 },
    ];
    expect(policy.select(neither, { text: `${system} y` }).id).toBe('w3');
  });

  it('stays under maxTreeChars and still routes by prefix after eviction', () => {
    const rand = mulberry32(7);
    const maxTreeChars = 20_000;
    const policy = new CacheAwarePolicy({ maxTreeChars });
    const owners: string[] = [];
    const texts: string[] = [];
    let peak = 0;
    for (let i = 0; i < 200; i++) {
      const text = randomText(rand, 1000);
      texts.push(text);
      owners.push(policy.select(workers([i % 3, (i + 1) % 3, (i + 2) % 3]), { text }).id);
      peak = Math.max(peak, policy.treeChars);
    }
    expect(peak).toBeLessThanOrEqual(maxTreeChars);
    expect(peak).toBeGreaterThan(maxTreeChars * 0.8);
    // The newest prompt survived eviction: a follow-up goes to its worker despite a higher load.
    const lastOwner = owners[199]!;
    const loads = [0, 1, 2].map((j) => (`w${j}` === lastOwner ? 10 : 0));
    expect(policy.select(workers(loads), { text: `${texts[199]} more` }).id).toBe(lastOwner);
    // The oldest was evicted: its follow-up goes by load.
    const firstOwnerLoads = [0, 1, 2].map((j) => (`w${j}` === owners[0] ? 10 : 0));
    expect(policy.select(workers(firstOwnerLoads), { text: `${texts[0]} more` }).id).not.toBe(owners[0]);
  });

  it('forgets a removed worker', () => {
    const policy = new CacheAwarePolicy();
    policy.select([{ id: 'w0', load: 0 }], { text: system });
    expect(policy.select(workers([3, 0]), { text: `${system} a` }).id).toBe('w0');
    policy.removeWorker('w0');
    expect(policy.treeChars).toBe(0);
    expect(policy.select(workers([3, 0]), { text: `${system} b` }).id).toBe('w1');
  });

  it('routes by load without text', () => {
    const policy = new CacheAwarePolicy();
    expect(policy.select(workers([4, 2, 3]), {}).id).toBe('w1');
    expect(policy.treeChars).toBe(0);
  });
});
