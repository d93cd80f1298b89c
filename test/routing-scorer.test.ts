import { describe, expect, it, vi } from 'vitest';
import { mulberry32 } from '../src/engine/prng.js';
import { adapterIn, loraState, readingOf, saturation } from '../src/routing/candidate-view.js';
import {
  AffinityIndex,
  blockHashes,
  type Candidate,
  type CandidateReading,
  createPolicy,
  type SCORER_DEFAULTS,
  ScorerPolicy,
  turnClock,
} from '../src/routing/index.js';
import { fewerIsBetter, lessIsBetter } from '../src/routing/scores.js';

interface Engine {
  waiting?: number;
  running?: number;
  kv?: number;
  lora?: { running: string[]; waiting?: string[]; max: number };
  state?: CandidateReading['state'];
  scrapedAt?: number;
  batchSize?: number;
  loadWhenAsked?: number;
}

/** A candidate whose engine reports `engine` (fresh unless said otherwise). */
function worker(
  id: string,
  engine: Engine = {},
  load = 0,
  adapters?: Map<string, string>,
  pendingPrefill?: number,
): Candidate {
  const reading: CandidateReading = {
    state: engine.state ?? 'fresh',
    signals: {
      waiting: engine.waiting ?? 0,
      running: engine.running ?? 0,
      kvCacheUsage: engine.kv,
      lora: engine.lora ? { waiting: [], ...engine.lora } : undefined,
      scrapedAt: engine.scrapedAt ?? 1,
      batchSize: engine.batchSize,
      loadWhenAsked: engine.loadWhenAsked,
    },
  };
  return {
    id,
    load,
    signals: () => reading,
    ...(adapters ? { adapters } : {}),
    ...(pendingPrefill === undefined ? {} : { pendingPrefill }),
  };
}

/** Only one scorer counts. */
function only(
  name: keyof typeof SCORER_DEFAULTS.weights,
  extra: Partial<typeof SCORER_DEFAULTS.weights> = {},
) {
  return { prefix: 0, queue: 0, kvCache: 0, lora: 0, inflight: 0, prefill: 0, [name]: 1, ...extra };
}

const SYSTEM = 'You are a helpful assistant who answers in full sentences. '.repeat(20);

/** The adapter a request for `model` asks for, among `candidates` read now (the scorer's adapterIn). */
const adapterOf = (candidates: Candidate[], model: string) =>
  adapterIn(
    candidates,
    candidates.map((c) => readingOf(c, performance.now())),
    model,
  );

describe('prefix blocks', () => {
  it('share the hashes of the blocks two prompts share, and no more', () => {
    const a = blockHashes('m', `${SYSTEM}${'first question '.repeat(10)}`, 64, 100);
    const b = blockHashes('m', `${SYSTEM}${'another question '.repeat(10)}`, 64, 100);
    const shared = Math.floor(SYSTEM.length / 64);
    expect(a.length).toBeGreaterThan(shared);
    expect(a.slice(0, shared)).toEqual(b.slice(0, shared));
    expect(a[shared]).not.toBe(b[shared]);
    for (const h of a) expect(Number.isSafeInteger(h)).toBe(true);
  });

  it('count whole blocks only, at most maxBlocks, and depend on the model', () => {
    expect(blockHashes('m', 'x'.repeat(63), 64, 100)).toEqual([]);
    expect(blockHashes('m', 'x'.repeat(640), 64, 100)).toHaveLength(10);
    expect(blockHashes('m', 'x'.repeat(640), 64, 3)).toHaveLength(3);
    expect(blockHashes('a', SYSTEM, 64, 1)).not.toEqual(blockHashes('b', SYSTEM, 64, 1));
  });
});

describe('the affinity index', () => {
  it('says how deep each worker holds a prompt, stopping at the first block nobody holds', () => {
    const index = new AffinityIndex({ blockChars: 64 });
    const h = blockHashes('m', SYSTEM, 64, 100);
    index.record(h.slice(0, 5), 'w1');
    index.record(h.slice(0, 2), 'w2');
    index.record(h.slice(7, 9), 'w3'); // past a gap: unreachable
    expect(Object.fromEntries(index.match(h))).toEqual({ w1: 5, w2: 2 });
    expect(Object.fromEntries(index.match(h, new Set(['w2', 'w3'])))).toEqual({ w2: 2 });
  });

  it('keeps the four workers most recently sent a block', () => {
    const index = new AffinityIndex();
    for (const id of ['a', 'b', 'c', 'd', 'e']) index.record([42], id);
    expect([...index.match([42]).keys()].sort()).toEqual(['b', 'c', 'd', 'e']);
    index.record([42], 'b');
    index.record([42], 'f');
    expect([...index.match([42]).keys()].sort()).toEqual(['b', 'd', 'e', 'f']);
  });

  it('forgets a block after its TTL, and the least recently used past maxEntries', () => {
    let now = 5000;
    const index = new AffinityIndex({ ttlMs: 1000, maxEntries: 3 }, () => now);
    index.record([1], 'w');
    now = 5999;
    expect(index.match([1]).get('w')).toBe(1);
    now = 6001;
    expect(index.match([1]).size).toBe(0);
    index.record([1, 2, 3, 4], 'w');
    expect(index.size).toBe(3);
    expect(index.match([2, 3, 4]).get('w')).toBe(3);
  });

  it('tells its listener what a decision taught: new blocks, a new worker first, a block untold for ttl/4', () => {
    let now = 1000;
    const index = new AffinityIndex({ ttlMs: 4000 }, () => now);
    const told: string[] = [];
    index.onRecord((hashes, id) => told.push(`${id}:${hashes.join(',')}`));
    index.record([1, 2], 'here');
    index.record([1, 2, 3], 'here'); // only 3 is news
    index.record([1, 2], 'other'); // a new first worker for both
    index.apply([4], 'there'); // another replica's: not told again
    now += 1001;
    index.record([1, 2, 4], 'other'); // 1 and 2 untold for over ttl/4, 4 has a new first worker
    expect(told).toEqual(['here:1,2', 'here:3', 'other:1,2', 'other:1,2,4']);
    expect(index.match([4]).get('there')).toBe(1);
  });
});

describe('the scorer filters', () => {
  const options = { maxWaiting: 5, maxKvCacheUsage: 0.9, defaultBatch: 256 };
  const view = (over: object) => ({
    candidate: { id: 'w', load: 0 },
    state: 'fresh' as const,
    waiting: 0,
    kvCacheUsage: undefined,
    lora: 'unknown' as const,
    ...over,
  });

  it('call a worker saturated when its reading is stale, its queue or its KV cache is past the bound', () => {
    expect(saturation(view({}), options)).toBeUndefined();
    expect(saturation(view({ state: 'stale' }), options)).toBe('stale');
    expect(saturation(view({ waiting: 5 }), options)).toBeUndefined();
    expect(saturation(view({ waiting: 6 }), options)).toBe('waiting');
    expect(saturation(view({ kvCacheUsage: 0.9 }), options)).toBeUndefined();
    expect(saturation(view({ kvCacheUsage: 0.91 }), options)).toBe('kv_cache');
  });

  it('leave saturated workers out, and say the fleet is saturated when all are', () => {
    const policy = new ScorerPolicy({}, undefined, mulberry32(1));
    const fleet = [worker('a', { waiting: 9 }), worker('b', { state: 'stale' }), worker('c', { kv: 0.97 })];
    expect(policy.saturated(fleet, {})).toBe(true);
    const withRoom = [...fleet, worker('d', { waiting: 4 })];
    expect(policy.saturated(withRoom, {})).toBe(false);
    for (let i = 0; i < 20; i++) expect(policy.select(withRoom, {}).id).toBe('d');
    expect(policy.lastExplanation?.filtered.saturated).toBe(3);
  });

  it('never hold requests for a fleet whose every reading is stale: it is scored as it is', () => {
    const policy = new ScorerPolicy({}, undefined, mulberry32(1));
    const dark = [worker('a', { state: 'stale' }), worker('b', { state: 'stale' })];
    expect(policy.saturated(dark, {})).toBe(false);
    expect(['a', 'b']).toContain(policy.select(dark, {}).id);
    // One engine saying it is full is evidence: with the others dark, the request waits.
    expect(policy.saturated([...dark, worker('c', { waiting: 9 })], {})).toBe(true);
  });

  it('count what the gateway sent since the engine was read as waiting there', () => {
    const policy = new ScorerPolicy({ saturation: { maxWaiting: 5 } });
    let load = 0;
    const reading: CandidateReading = {
      state: 'fresh',
      signals: { waiting: 3, running: 8, kvCacheUsage: 0.2, lora: undefined, scrapedAt: 100 },
    };
    const c: Candidate = {
      id: 'w',
      get load() {
        return load;
      },
      signals: () => reading,
    };
    expect(policy.saturated([c], {})).toBe(false); // marks load 0 at this reading
    load = 1;
    expect(policy.saturated([c], {})).toBe(false); // 3 + 1: one more makes 5
    load = 2;
    expect(policy.saturated([c], {})).toBe(true); // 3 + 2: one more would be 6 > 5
    load = 1; // one of them ended
    expect(policy.saturated([c], {})).toBe(false);
  });

  it('count what was sent while the engine was being read, which its answer may not show', () => {
    const policy = new ScorerPolicy({ saturation: { maxWaiting: 2 } });
    // The engine was asked with 10 of the gateway's requests on it, answered "8 running, 1
    // waiting"; 2 more were sent before the answer came back and are not in it.
    const asked = { waiting: 1, running: 8, kv: 0.2, scrapedAt: 100, loadWhenAsked: 10 };
    // 1 + the 2 sent since it was asked: a request more would wait past the bound.
    expect(policy.saturated([worker('w', asked, 12)], {})).toBe(true);
    // Asked with 10 there, it holds 8 (1 waiting, 7 running, a batch of 7): 2 were still on
    // their way and count as sent: 1 + 2 waiting; with one sent since, 1 + 3 (the bound is 4).
    const later = new ScorerPolicy({ saturation: { maxWaiting: 4 } });
    const onTheWay = { waiting: 1, running: 7, batchSize: 7, kv: 0.2, scrapedAt: 100, loadWhenAsked: 10 };
    expect(later.saturated([worker('w', onTheWay, 10)], {})).toBe(false);
    expect(later.saturated([worker('w', onTheWay, 11)], {})).toBe(true);
  });

  it('fill the room an engine’s batch has before what the gateway sends counts as waiting', () => {
    const policy = new ScorerPolicy({ saturation: { maxWaiting: 2 } });
    let load = 0;
    let reading: CandidateReading = {
      state: 'fresh',
      signals: { waiting: 1, running: 8, kvCacheUsage: 0.2, lora: undefined, scrapedAt: 100 },
    };
    const c: Candidate = {
      id: 'w',
      get load() {
        return load;
      },
      signals: () => reading,
    };
    expect(policy.saturated([c], {})).toBe(false); // requests wait with 8 running: a batch of 8
    reading = {
      state: 'fresh',
      signals: { waiting: 0, running: 5, kvCacheUsage: 0.2, lora: undefined, scrapedAt: 200 },
    };
    expect(policy.saturated([c], {})).toBe(false);
    load = 4; // 3 fill the batch, 1 waits: one more makes 2
    expect(policy.saturated([c], {})).toBe(false);
    load = 5; // 2 wait: one more would be 3 > 2
    expect(policy.saturated([c], {})).toBe(true);
  });

  it('count a cold burst against the batch the engine reports, else the worker is configured with, else the default', () => {
    const cold = (batchSize: number | undefined, maxBatch: number | undefined, defaultBatch?: number) => {
      const policy = new ScorerPolicy({
        saturation: { maxWaiting: 1, ...(defaultBatch ? { defaultBatch } : {}) },
      });
      let load = 0;
      const reading: CandidateReading = {
        state: 'fresh',
        signals: { waiting: 0, running: 0, batchSize, kvCacheUsage: 0.1, lora: undefined, scrapedAt: 1 },
      };
      const c: Candidate = {
        id: 'w',
        maxBatch,
        get load() {
          return load;
        },
        signals: () => reading,
      };
      // How many go before the rest are held.
      while (!policy.saturated([c], {}) && load < 10_000) load++;
      return load;
    };
    expect(cold(4, 8)).toBe(4 + 1); // the engine's report first
    expect(cold(undefined, 8)).toBe(8 + 1);
    expect(cold(undefined, undefined, 16)).toBe(16 + 1);
    expect(cold(undefined, undefined)).toBe(256 + 1); // SCORER_DEFAULTS
  });

  it('take a LoRA adapter to workers that have it loaded or a slot free, not to full ones', () => {
    const reading = (lora: Engine['lora']) => worker('x', { lora }).signals!();
    expect(loraState(reading({ running: ['a'], max: 2 }), 'a')).toBe('loaded');
    expect(loraState(reading({ running: [], waiting: ['a'], max: 1 }), 'a')).toBe('loaded');
    expect(loraState(reading({ running: ['b'], max: 2 }), 'a')).toBe('free');
    expect(loraState(reading({ running: ['b', 'c'], max: 2 }), 'a')).toBe('full');
    expect(loraState(reading(undefined), 'a')).toBe('unknown');
    const policy = new ScorerPolicy({ weights: only('inflight') }, undefined, mulberry32(2));
    const listed = new Map([['a', 'base']]);
    const fleet = [
      worker('full', { lora: { running: ['b', 'c'], max: 2 } }, 0, listed),
      worker('free', { lora: { running: ['b'], max: 2 } }, 5, listed),
    ];
    // The full worker is idle, the one with a free slot is busy: the slot wins.
    expect(policy.select(fleet, { model: 'a' }).id).toBe('free');
    expect(policy.lastExplanation?.filtered.lora).toBe(1);
    // A base-model request is no adapter's: no LoRA filter.
    expect(adapterOf(fleet, 'base')).toBeUndefined();
    expect(policy.select(fleet, { model: 'base' }).id).toBe('full');
  });

  it('know an adapter from /v1/models (adapters) as well as from the signals', () => {
    const listed = worker('w', {}, 0, new Map([['sql-lora', 'llama']]));
    expect(adapterOf([listed], 'sql-lora')).toBe('sql-lora');
    expect(adapterOf([listed], 'llama')).toBeUndefined();
    expect(adapterOf([worker('v', { lora: { running: ['x'], max: 1 } })], 'x')).toBe('x');
  });
});

describe('a heavy tenant', () => {
  const LONG = 5000;
  const index = () => {
    const affinity = new AffinityIndex({ blockChars: 64 });
    affinity.record(blockHashes('m', `${SYSTEM}question`, 64, 512), 'busy');
    return affinity;
  };
  const text = `${SYSTEM}question`;

  it('goes only to a worker with no prompt pending prefill, though another holds its prefix', () => {
    const fleet = [worker('busy', {}, 1, undefined, 300), worker('clear', {}, 1, undefined, 0)];
    const policy = new ScorerPolicy({ weights: only('prefix'), heavy: { turnMs: 0 } }, index());
    expect(policy.select(fleet, { text, model: 'm' }).id).toBe('busy');
    expect(policy.select(fleet, { text, model: 'm', tenantWeight: 'heavy' }).id).toBe('clear');
    expect(policy.lastExplanation?.filtered).toEqual({ saturated: 0, lora: 0, heavy_tenant: 1 });
    const off = new ScorerPolicy({ weights: only('prefix'), heavy: { isolate: false } }, index());
    expect(off.select(fleet, { text, model: 'm', tenantWeight: 'heavy' }).id).toBe('busy');
  });

  it('waits in the gateway while every worker has a prompt pending, or long ones are pending on its share of them', () => {
    const policy = new ScorerPolicy({ heavy: { prefillShare: 0.5, longPrefillChars: 2048, turnMs: 0 } });
    const fleet = (...pending: number[]) => pending.map((p, i) => worker(`w${i}`, {}, 1, undefined, p));
    const heavy = { tenantWeight: 'heavy' as const };
    // Every worker has a prompt pending (a short one): the heavy tenant waits, the others do not.
    expect(policy.saturated(fleet(100, 100, 100, 100), heavy)).toBe(true);
    expect(policy.saturated(fleet(100, 100, 100, 100), { tenantWeight: 'light' })).toBe(false);
    expect(policy.saturated(fleet(100, 100, 100, 100), {})).toBe(false);
    // One clear, one long pending of 4: it goes; two long of 4 (half): it waits though two are clear.
    expect(policy.saturated(fleet(LONG, 100, 0, 0), heavy)).toBe(false);
    expect(policy.saturated(fleet(LONG, LONG, 0, 0), heavy)).toBe(true);
    expect(policy.saturated(fleet(LONG, 2048, 0, 0), heavy)).toBe(false); // 2048 is not long
    // Always at least one worker: of two, one long pending holds it.
    expect(policy.saturated(fleet(LONG, 0), heavy)).toBe(true);
    expect(policy.saturated(fleet(100, 0), heavy)).toBe(false);
    // Off: a heavy tenant is held only by the saturation every request is.
    const off = new ScorerPolicy({ heavy: { isolate: false } });
    expect(off.saturated(fleet(LONG, LONG, 100, 100), heavy)).toBe(false);
  });

  it('leaves the others the workers without a long prompt pending and with room in their batch', () => {
    // A policy per pick: each pick teaches the affinity index where the prompt went.
    const policy = () => new ScorerPolicy({ weights: only('prefix'), heavy: { turnMs: 0 } }, index());
    // `busy` holds the prefix, but a long prompt is pending there: a light request goes elsewhere.
    const fleet = [worker('busy', {}, 1, undefined, LONG), worker('clear', {}, 1, undefined, 0)];
    expect(policy().select(fleet, { text, model: 'm', tenantWeight: 'light' }).id).toBe('clear');
    expect(policy().select(fleet, { text, model: 'm' }).id).toBe('busy'); // nobody heavy: the prefix wins
    // A short prompt pending (a light one's) does not keep it away.
    const short = [worker('busy', {}, 1, undefined, 400), worker('clear', {}, 1, undefined, 0)];
    expect(policy().select(short, { text, model: 'm', tenantWeight: 'light' }).id).toBe('busy');
    // Nor its batch while fewer are in flight there than its engine has been seen running: 16 seen, 16 in flight is full.
    const seen = new ScorerPolicy({ weights: only('prefix'), heavy: { turnMs: 0 } }, index());
    const engine = (running: number, scrapedAt: number, load: number) => [
      worker('busy', { running, scrapedAt }, load, undefined, 0),
      worker('clear', { running: 4, scrapedAt }, 2, undefined, 0),
    ];
    expect(seen.select(engine(15, 1, 14), { text, model: 'm', tenantWeight: 'light' }).id).toBe('busy');
    expect(seen.select(engine(16, 2, 16), { text, model: 'm', tenantWeight: 'light' }).id).toBe('clear');
    expect(seen.lastExplanation?.filtered.heavy_tenant).toBe(1);
    // The most it ever ran stays its size: 15 in flight there, though it now reports 12 running, has room.
    seen.select(engine(12, 3, 15), { text, model: 'm', tenantWeight: 'light' });
    expect(seen.lastExplanation?.filtered.heavy_tenant).toBe(0);
    // When none fits, all are scored (a request that could not wait is still sent).
    const none = [worker('busy', {}, 1, undefined, LONG), worker('other', {}, 1, undefined, LONG)];
    const last = policy();
    expect(last.select(none, { text, model: 'm', tenantWeight: 'light' }).id).toBe('busy');
    expect(last.lastExplanation?.filtered).toEqual({ saturated: 0, lora: 0 });
  });
});

describe('a heavy tenant, its workers taken in turn', () => {
  const ids = ['w0', 'w1', 'w2', 'w3'];
  const fleet = (without?: string) =>
    ['w3', 'w0', 'w2', 'w1'].filter((id) => id !== without).map((id) => worker(id, {}, 0, undefined, 0));
  // The picker gives the model's whole worker list (RouteContext.fleet), whatever the candidates.
  const heavy = { text: 'a document', model: 'm', tenantWeight: 'heavy' as const, fleet: ids };
  const light = { text: 'a question', model: 'm', tenantWeight: 'light' as const, fleet: ids };
  /** Every worker `policy` picks for `ctx` among `candidates`, over many picks (ties are broken at random). */
  const picks = (policy: ScorerPolicy, ctx: typeof heavy | typeof light, candidates = fleet()) => {
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) seen.add(policy.select(candidates, ctx).id);
    return [...seen].sort();
  };

  it("sends the heavy tenant's prompts to the workers whose turn it is, the others' to the rest, alike on every replica whatever candidates each has, the turn moving with the clock", () => {
    let now = 1_000_000; // turn 10,000 of 100 ms: 10,000 % 4 = 0, so w0 and w1 of four
    const make = (seed: number) =>
      new ScorerPolicy(
        { heavy: { prefillShare: 0.5, turnMs: 100 } },
        new AffinityIndex(),
        mulberry32(seed),
        () => now,
      );
    const [one, two] = [make(1), make(2)];
    expect(picks(one, heavy)).toEqual(['w0', 'w1']);
    expect(picks(one, light)).toEqual(['w2', 'w3']);
    // The other replica's pick lacks w3 (no free slot there): the turn is the same set.
    expect(picks(two!, heavy, fleet('w3'))).toEqual(['w0', 'w1']);
    expect(picks(two!, light, fleet('w3'))).toEqual(['w2']);
    now = 1_000_100; // one turn on: w1 and w2
    expect(picks(one, heavy)).toEqual(['w1', 'w2']);
    expect(picks(one, light)).toEqual(['w0', 'w3']);
    expect(picks(two!, heavy, fleet('w0'))).toEqual(['w1', 'w2']);
    // The heavy tenant waits while its turn's workers have prompts pending, though others are clear.
    const busyTurn = ids.map((id) => worker(id, {}, 0, undefined, id === 'w0' ? 0 : 300));
    now = 1_000_000;
    expect(one.saturated(busyTurn, heavy)).toBe(false); // w0 is clear
    now = 1_000_100;
    expect(one.saturated(busyTurn, heavy)).toBe(true); // w1 and w2 are not
    // Light requests fall back to the heavy tenant's turn when the rest do not fit.
    const restLong = ids.map((id) => worker(id, {}, 0, undefined, id === 'w1' || id === 'w2' ? 0 : 5000));
    expect(one.select(restLong, light).id).toMatch(/^w[12]$/);
    // Without a turn the heavy tenant may go to any clear worker.
    const any = new ScorerPolicy({ heavy: { turnMs: 0 } }, new AffinityIndex(), mulberry32(3));
    expect(picks(any, heavy)).toEqual(['w0', 'w1', 'w2', 'w3']);
  });

  it('takes its turn by a clock a step of the wall clock does not move (turnClock)', () => {
    for (const step of [10 * 60_000, -10 * 60_000]) {
      const before = turnClock();
      vi.useFakeTimers({ toFake: ['Date'] });
      try {
        vi.setSystemTime(Date.now() + step);
        // The wall clock moved by the step; the turn's clock only by the time the test took.
        expect(Math.abs(Date.now() - before - step)).toBeLessThan(Math.abs(step) / 10);
        expect(Math.abs(turnClock() - before)).toBeLessThan(Math.abs(step) / 10);
      } finally {
        vi.useRealTimers();
      }
    }
  });
});

describe('the scorers', () => {
  it('prefix: a prompt goes where its prefix was sent, decided by prefix', () => {
    const policy = new ScorerPolicy({ weights: only('prefix') }, new AffinityIndex({ blockChars: 64 }));
    const fleet = [worker('a'), worker('b'), worker('c')];
    const first = policy.select(fleet, { text: `${SYSTEM}q1`, model: 'm' });
    for (let i = 2; i < 10; i++) {
      expect(policy.select(fleet, { text: `${SYSTEM}q${i}`, model: 'm' }).id).toBe(first.id);
      expect(policy.lastExplanation?.decidedBy).toBe('prefix');
    }
    // Another model's identical prompt has no affinity yet.
    policy.select(fleet, { text: `${SYSTEM}q1`, model: 'other' });
    expect(policy.lastExplanation?.decidedBy).toBe('random_tie');
  });

  it('queue: the engine with the fewest requests waiting', () => {
    const policy = new ScorerPolicy({ weights: only('queue') });
    const fleet = [worker('a', { waiting: 4 }), worker('b', { waiting: 1 }), worker('c', { waiting: 3 })];
    expect(policy.select(fleet, {}).id).toBe('b');
    expect(policy.lastExplanation?.decidedBy).toBe('queue');
  });

  it('kvCache: the engine with the most KV cache free', () => {
    const policy = new ScorerPolicy({ weights: only('kvCache') });
    const fleet = [worker('a', { kv: 0.7 }), worker('b', { kv: 0.2 }), worker('c', { kv: 0.5 })];
    expect(policy.select(fleet, {}).id).toBe('b');
    expect(policy.lastExplanation?.decidedBy).toBe('kvCache');
  });

  it('lora: the engine that has the adapter loaded', () => {
    const policy = new ScorerPolicy({ weights: only('lora') });
    const fleet = [
      worker('a', { lora: { running: ['x'], max: 4 } }),
      worker('b', { lora: { running: ['sql'], max: 4 } }),
      worker('c', { lora: { running: [], max: 4 } }),
    ];
    expect(policy.select(fleet, { model: 'sql' }).id).toBe('b');
    expect(policy.lastExplanation?.decidedBy).toBe('lora');
  });

  it('inflight: the worker with the fewest of this gateway’s requests', () => {
    const policy = new ScorerPolicy({ weights: only('inflight') });
    const fleet = [worker('a', {}, 3), worker('b', {}, 7), worker('c', {}, 1)];
    expect(policy.select(fleet, {}).id).toBe('c');
    expect(policy.lastExplanation?.decidedBy).toBe('inflight');
  });

  it('prefill: the least work ahead, a backlog and the prompt’s uncached part in one unit of characters', () => {
    const index = new AffinityIndex({ blockChars: 64 });
    const text = `${SYSTEM}question`; // 1188 characters: 18 whole blocks
    index.record(blockHashes('m', text, 64, 512), 'holder');
    const policy = new ScorerPolicy({ weights: only('prefill') }, index);
    // Nothing queued anywhere: the worker holding the prefix has the least to compute.
    const idle = [worker('holder'), worker('other')];
    expect(policy.select(idle, { text, model: 'm' }).id).toBe('holder');
    expect(policy.lastExplanation?.decidedBy).toBe('prefill');
    expect(policy.lastExplanation?.prefillChars).toBe(text.length - 18 * 64);
    // Three long prompts not yet answering there outweigh what its cache saves.
    const backlog = [worker('holder', {}, 3, undefined, 3 * 6000), worker('other', {}, 0, undefined, 0)];
    expect(policy.select(backlog, { text, model: 'm' }).id).toBe('other');
    expect(policy.lastExplanation?.prefillChars).toBe(text.length);
    // A one-worker fleet counts the whole prompt (no prefix is looked up).
    policy.select([worker('holder')], { text, model: 'm' });
    expect(policy.lastExplanation).toMatchObject({ decidedBy: 'only_candidate', prefillChars: text.length });
  });

  it('weighs them: a long queue outweighs a prefix match when its weight is higher, not otherwise', () => {
    const index = new AffinityIndex({ blockChars: 64 });
    const text = `${SYSTEM}question`;
    index.record(blockHashes('m', text, 64, 512), 'busy');
    const fleet = [worker('busy', { waiting: 4 }), worker('idle', { waiting: 0 })];
    const prefixFirst = new ScorerPolicy({ weights: only('prefix', { queue: 0.5 }) }, index);
    expect(prefixFirst.select(fleet, { text, model: 'm' }).id).toBe('busy');
    expect(prefixFirst.lastExplanation?.decidedBy).toBe('prefix');
    const queueFirst = new ScorerPolicy({ weights: only('prefix', { queue: 2 }) }, index);
    expect(queueFirst.select(fleet, { text, model: 'm' }).id).toBe('idle');
    expect(queueFirst.lastExplanation?.decidedBy).toBe('queue');
    expect(queueFirst.lastExplanation?.scores[0]).toMatchObject({ id: 'idle', by: { queue: 2 } });
  });

  it('breaks ties at random: every tied worker, reproducibly from the seed', () => {
    const fleet = [worker('a', {}, 1), worker('b', {}, 1), worker('c', {}, 1), worker('d', {}, 9)];
    const picks = (seed: number) => {
      const policy = createPolicy('scorer', { random: mulberry32(seed) });
      return Array.from({ length: 60 }, () => policy.select(fleet, {}).id);
    };
    const run = picks(7);
    expect(new Set(run)).toEqual(new Set(['a', 'b', 'c']));
    expect(picks(7)).toEqual(run);
    expect(picks(8)).not.toEqual(run);
  });

  it('says the winner was decided by the scorer that set it apart, not the one it scored most on', () => {
    const policy = new ScorerPolicy({ weights: { ...only('kvCache', { kvCache: 3, inflight: 1 }) } });
    const fleet = [worker('a', { kv: 0.1 }, 2), worker('b', { kv: 0.1 }, 0)];
    expect(policy.select(fleet, {}).id).toBe('b');
    expect(policy.lastExplanation?.decidedBy).toBe('inflight');
    expect(policy.lastExplanation?.scores.map((s) => [s.id, s.by.kvCache])).toEqual([
      ['b', 2.7],
      ['a', 2.7],
    ]);
  });

  it('scores prefill work against a scale of characters: a few hundred more is nearly nothing', () => {
    expect(lessIsBetter([0, 2048, 8192], 8192)).toEqual([1, 0.75, 0]);
    expect(lessIsBetter([0, 16384], 8192)).toEqual([1, 0]); // past the scale: against the most
    expect(lessIsBetter([0, 0], 0)).toEqual([1, 1]);
    // At the default weights, one request fewer in flight outweighs 300 characters less to prefill.
    const policy = new ScorerPolicy();
    const fleet = [worker('busy', {}, 3, undefined, 0), worker('light', {}, 2, undefined, 300)];
    expect(policy.select(fleet, { text: 'a short question', model: 'm' }).id).toBe('light');
    expect(policy.lastExplanation?.decidedBy).toBe('inflight');
  });

  it('scores the gateway’s own load against the largest of the candidates’', () => {
    expect(fewerIsBetter([0, 1, 3])).toEqual([1, 0.75, 0.25]);
    expect(fewerIsBetter([0, 0])).toEqual([1, 1]);
  });
});
