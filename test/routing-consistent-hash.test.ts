import { describe, expect, it } from 'vitest';
import { type Candidate, ConsistentHashPolicy, hash32 } from '../src/routing/index.js';

const KEYS = Array.from({ length: 10_000 }, (_, i) => `session-${i}`);

function workers(n: number): Candidate[] {
  return Array.from({ length: n }, (_, i) => ({ id: `worker-${i}`, load: 0 }));
}

function assign(policy: ConsistentHashPolicy, candidates: readonly Candidate[]): string[] {
  return KEYS.map((hashKey) => policy.select(candidates, { hashKey }).id);
}

describe('hash32', () => {
  it('is a stable unsigned 32-bit hash', () => {
    expect(hash32('abc')).toBe(hash32('abc'));
    expect(hash32('abc')).not.toBe(hash32('abd'));
    for (const s of ['', 'a', 'worker-1#0', 'é😀']) {
      const h = hash32(s);
      expect(Number.isInteger(h) && h >= 0 && h < 2 ** 32).toBe(true);
    }
  });
});

describe('consistent_hash', () => {
  it('maps the same key to the same worker, whatever the candidate order', () => {
    const policy = new ConsistentHashPolicy();
    const candidates = workers(4);
    const before = assign(policy, candidates);
    expect(assign(policy, candidates)).toEqual(before);
    expect(assign(new ConsistentHashPolicy(), [...candidates].reverse())).toEqual(before);
  });

  it('spreads keys within 25% of an even share', () => {
    const owners = assign(new ConsistentHashPolicy(), workers(4));
    const counts = new Map<string, number>();
    for (const id of owners) counts.set(id, (counts.get(id) ?? 0) + 1);
    expect(counts.size).toBe(4);
    for (const n of counts.values()) expect(Math.abs(n - 2500)).toBeLessThan(2500 * 0.25);
  });

  it('spreads keys evenly over workers named by host:port too', () => {
    const candidates = Array.from({ length: 8 }, (_, i) => ({ id: `10.0.0.${i + 1}:8000`, load: 0 }));
    const counts = new Map<string, number>();
    for (const id of assign(new ConsistentHashPolicy(), candidates))
      counts.set(id, (counts.get(id) ?? 0) + 1);
    expect(counts.size).toBe(8);
    for (const n of counts.values()) expect(Math.abs(n - 1250)).toBeLessThan(1250 * 0.25);
  });

  it('moves only about 1/5 of keys, all to the new worker, when a fifth joins', () => {
    const policy = new ConsistentHashPolicy();
    const before = assign(policy, workers(4));
    const after = assign(policy, workers(5));
    let movedCount = 0;
    for (let i = 0; i < KEYS.length; i++) {
      if (before[i] === after[i]) continue;
      movedCount++;
      expect(after[i]).toBe('worker-4');
    }
    expect(movedCount / KEYS.length).toBeLessThan(0.3);
    expect(movedCount / KEYS.length).toBeGreaterThan(0.1);
  });

  it("moves only the leaving worker's keys", () => {
    const policy = new ConsistentHashPolicy();
    const all = workers(5);
    const before = assign(policy, all);
    policy.removeWorker('worker-2');
    const after = assign(
      policy,
      all.filter((c) => c.id !== 'worker-2'),
    );
    for (let i = 0; i < KEYS.length; i++) {
      if (before[i] === 'worker-2') expect(after[i]).not.toBe('worker-2');
      else expect(after[i]).toBe(before[i]);
    }
  });

  it('returns the candidate object given, with its current load', () => {
    const policy = new ConsistentHashPolicy();
    const candidates = workers(3).map((c, i) => ({ ...c, load: i + 1 }));
    const chosen = policy.select(candidates, { hashKey: 'k' });
    expect(candidates).toContain(chosen);
  });

  it('falls back to the least loaded without a key', () => {
    const policy = new ConsistentHashPolicy();
    const candidates = [
      { id: 'a', load: 5 },
      { id: 'b', load: 1 },
      { id: 'c', load: 3 },
    ];
    expect(policy.select(candidates, {}).id).toBe('b');
    expect(policy.select(candidates, { hashKey: '' }).id).toBe('b');
  });

  it('honours virtualNodes: one point each spreads far worse than the default', () => {
    const spread = (policy: ConsistentHashPolicy): number => {
      const counts = new Map<string, number>();
      for (const id of assign(policy, workers(4))) counts.set(id, (counts.get(id) ?? 0) + 1);
      const values = [...counts.values()];
      return Math.max(...values) - (values.length < 4 ? 0 : Math.min(...values));
    };
    expect(spread(new ConsistentHashPolicy({ virtualNodes: 1 }))).toBeGreaterThan(
      spread(new ConsistentHashPolicy()),
    );
  });
});
