import { describe, expect, it } from 'vitest';
import { EngineMetrics } from '../src/mock/engine-metrics.js';
import { EngineModel, EngineRejected, type EngineTicket } from '../src/mock/engine-model.js';
import type { EngineOptions } from '../src/mock/engine-options.js';
import { chatTokens, countTextTokens, textTokens } from '../src/mock/engine-tokens.js';
import { BlockPool } from '../src/mock/prefix-cache.js';
import { VirtualClock } from '../src/mock/virtual-clock.js';

/**
 * The mock's engine model under a virtual clock: every decision and every time is the engine's
 * own, the same on every run, so the tests check orders, counts and the times the model computes.
 */

/** Token ids from..from+n-1. */
const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

/** Small numbers: 4 tokens a block, a step of one sequence 10 ms, 1 ms per prompt token. */
const SMALL: EngineOptions = {
  blockSize: 4,
  cacheBlocks: 64,
  maxBatch: 4,
  maxBatchedTokens: 64,
  decodeTokensPerSecond: 100,
  batchSlowdown: 0.1,
  prefillTokensPerSecond: 1000,
};

function setup(options: EngineOptions = {}) {
  const clock = new VirtualClock();
  const model = new EngineModel({ ...SMALL, ...options }, clock);
  /** `label:index` for each token, `!` on the last, in the order the engine gives them. */
  const events: string[] = [];
  /** The clock's time of each token, by label. */
  const times = new Map<string, number[]>();
  /** The most requests seen running at once when a token came. */
  let peakRunning = 0;
  const submit = (
    label: string,
    prompt: readonly number[],
    outputTokens = 1,
    extra: { adapter?: string; outputIds?: readonly number[]; priority?: number } = {},
  ): EngineTicket =>
    model.submit({
      prompt,
      outputTokens,
      ...extra,
      onToken: (index, last) => {
        events.push(`${label}:${index}${last ? '!' : ''}`);
        times.set(label, [...(times.get(label) ?? []), clock.now()]);
        peakRunning = Math.max(peakRunning, model.numRunning + (last ? 1 : 0));
      },
    });
  return { clock, model, events, times, submit, peak: () => peakRunning };
}

describe('engine model: the prefix cache', () => {
  it('a prompt hits the full blocks of the prefix it shares with a finished one, never its own last token', () => {
    const { clock, model, submit } = setup();
    const a = submit('a', ids(0, 20));
    clock.runAll();
    const same = submit('same', ids(0, 20));
    const half = submit('half', [...ids(0, 10), ...ids(100, 10)]);
    clock.runAll();
    expect(a.hitTokens).toBe(0);
    // 20 tokens = 5 full blocks, but the last token is always computed: 4 blocks hit.
    expect(same.hitTokens).toBe(16);
    // 10 shared tokens: 2 full blocks.
    expect(half.hitTokens).toBe(8);
    expect(model.stats.prefixQueries).toBe(60);
    expect(model.stats.prefixHits).toBe(24);
    expect(model.stats.prefillTokens).toBe(60 - 24);
  });

  it('blocks hit only while the chain before them is cached: the same tokens after a different first block miss', () => {
    const { clock, submit } = setup();
    submit('a', ids(0, 20));
    clock.runAll();
    const other = submit('other', [999, ...ids(1, 19)]);
    clock.runAll();
    expect(other.hitTokens).toBe(0);
  });

  it("an answer's blocks are cached with its prompt: the next turn hits both", () => {
    const { clock, submit } = setup();
    submit('turn1', ids(0, 10), 6, { outputIds: ids(50, 6) });
    clock.runAll();
    const turn2 = submit('turn2', [...ids(0, 10), ...ids(50, 6), ...ids(200, 5)]);
    clock.runAll();
    expect(turn2.hitTokens).toBe(16);
  });

  it("a LoRA adapter's blocks are cached apart from the base model's", () => {
    const { clock, submit } = setup({ adapters: ['sql'] });
    submit('base', ids(0, 20));
    clock.runAll();
    const lora = submit('lora', ids(0, 20), 1, { adapter: 'sql' });
    clock.runAll();
    const again = submit('again', ids(0, 20), 1, { adapter: 'sql' });
    clock.runAll();
    expect(lora.hitTokens).toBe(0);
    expect(again.hitTokens).toBe(16);
  });

  it('without prefix caching nothing hits', () => {
    const { clock, model, submit } = setup({ prefixCaching: false });
    submit('a', ids(0, 20));
    clock.runAll();
    const b = submit('b', ids(0, 20));
    clock.runAll();
    expect(b.hitTokens).toBe(0);
    expect(model.stats.prefixHits).toBe(0);
  });

  it('a full cache evicts the blocks used longest ago, and a hit makes blocks recent again', () => {
    // 6 blocks of 4 tokens; an 8-token prompt and 1 output token take 3 blocks, its 2 full ones cached.
    const { clock, model, submit } = setup({ cacheBlocks: 6 });
    const run = (label: string, prompt: number[]) => {
      const t = submit(label, prompt);
      clock.runAll();
      return t;
    };
    const a = ids(0, 8);
    const b = ids(100, 8);
    run('a', a);
    run('b', b);
    expect(model.cachedBlocks).toBe(4);
    // A prompt that goes on after a's 8 tokens hits both its blocks; a is now more recent than b.
    expect(run('a, then more', [...a, 900]).hitTokens).toBe(8);
    run('c', ids(200, 8)); // 3 blocks: a free one and b's two
    expect(model.stats.evictions).toBe(2);
    expect(run('a, then other', [...a, 901]).hitTokens).toBe(8);
    expect(run('b, then more', [...b, 902]).hitTokens).toBe(0);
  });

  it("a request's blocks are freed last block first: a partial eviction takes the tail of a sequence and keeps its prefix", () => {
    const { clock, model, submit } = setup({ cacheBlocks: 6 });
    submit('a', ids(0, 12)); // 4 blocks, 3 of them cached
    clock.runAll();
    submit('other', ids(300, 12)); // 4 blocks: the 2 never used, a's partial 4th and a's 3rd
    clock.runAll();
    expect(model.stats.evictions).toBe(1);
    const again = submit('a, then more', [...ids(0, 12), 900]);
    clock.runAll();
    expect(again.hitTokens).toBe(8);
  });

  it('the block pool: usage counts blocks in use, cached free blocks are free, and a reset is refused while blocks are in use', () => {
    const pool = new BlockPool(4);
    const taken = pool.take([], 2);
    pool.register(taken[0]!, 11);
    expect(pool.usage()).toBe(0.5);
    expect(pool.reset()).toBe(false);
    pool.release(taken);
    expect(pool.usage()).toBe(0);
    expect(pool.match([11, 12])).toEqual([taken[0]]);
    expect(pool.reset()).toBe(true);
    expect(pool.match([11])).toEqual([]);
    expect(() => pool.release(taken)).toThrow(/released more often/);
  });
});

describe('engine model: batching and the queue', () => {
  it('runs at most maxBatch requests; the rest wait and are admitted first come, first served', () => {
    const { clock, model, events, submit, peak } = setup({ maxBatch: 2 });
    for (const label of ['a', 'b', 'c', 'd']) submit(label, ids(label.charCodeAt(0) * 100, 4), 3);
    expect(model.numWaiting).toBe(4);
    clock.runAll();
    expect(events).toEqual([
      'a:0',
      'b:0',
      'a:1',
      'b:1',
      'a:2!',
      'b:2!',
      'c:0',
      'd:0',
      'c:1',
      'd:1',
      'c:2!',
      'd:2!',
    ]);
    expect(peak()).toBe(2);
    expect(model.numRunning).toBe(0);
    expect(model.numWaiting).toBe(0);
  });

  it('under priority scheduling the waiting queue goes by priority, lower first, then by arrival; the batch is never taken back', () => {
    const { clock, model, events, submit } = setup({ maxBatch: 1, schedulingPolicy: 'priority' });
    submit('a', ids(100, 4), 2, { priority: 5 });
    clock.advance(1); // a runs: a request in the batch keeps its place
    submit('b', ids(200, 4), 1, { priority: 5 });
    submit('c', ids(300, 4), 1, { priority: 9 });
    submit('d', ids(400, 4), 1, { priority: 1 });
    submit('e', ids(500, 4), 1, { priority: 5 });
    submit('f', ids(600, 4), 1);
    expect(model.numWaiting).toBe(5);
    clock.runAll();
    expect(events).toEqual(['a:0', 'a:1!', 'f:0!', 'd:0!', 'b:0!', 'e:0!', 'c:0!']);
  });

  it('first come, first served refuses a request with a priority, as vLLM does without priority scheduling', () => {
    const { clock, events, submit } = setup({ maxBatch: 1 });
    expect(() => submit('a', ids(100, 4), 1, { priority: 3 })).toThrow(
      new EngineRejected('Got priority 3 but Priority scheduling is not enabled.'),
    );
    submit('b', ids(200, 4), 1, { priority: 0 });
    clock.runAll();
    expect(events).toEqual(['b:0!']);
  });

  it('a request admitted while others decode joins the batch at the next step', () => {
    const { clock, events, submit } = setup();
    submit('a', ids(0, 4), 4);
    clock.advance(15); // a's first step (prefill) ended at 14 ms; its second is running
    submit('b', ids(100, 4), 2);
    clock.runAll();
    expect(events).toEqual(['a:0', 'a:1', 'a:2', 'b:0', 'a:3!', 'b:1!']);
  });

  it("under a timer that runs late, a request joins the first step that began after it arrived, on the engine's timeline", () => {
    // A clock whose tasks run 20 ms after their time (longer than a step), as a busy event loop
    // runs timers: the engine's timeline (each step ends its length after it began) does not
    // slip with them, and a request is not in a step that began before it arrived.
    const lateModel = () => {
      const inner = new VirtualClock();
      const late = {
        now: () => inner.now(),
        at: (due: number, task: () => void) => inner.at(due + 20, task),
      };
      return { inner, model: new EngineModel(SMALL, late) };
    };
    const noop = () => {};
    const { inner, model } = lateModel();
    const a = model.submit({ prompt: ids(0, 4), outputTokens: 4, onToken: noop });
    // a's steps on the engine's timeline: 0-14 (prefill and first token), 14-24, 24-34, 34-44;
    // each is planned 20 ms late on the clock.
    inner.advance(25);
    const b = model.submit({ prompt: ids(100, 4), outputTokens: 2, onToken: noop });
    inner.runAll();
    for (const t of [a, b]) {
      expect(t.state).toBe('finished');
      expect(t.admittedAt!).toBeGreaterThanOrEqual(t.arrivedAt);
      expect(t.firstTokenAt!).toBeGreaterThan(t.admittedAt!);
      expect(t.finishedAt!).toBeGreaterThan(t.firstTokenAt!);
    }
    expect(a.admittedAt).toBe(0);
    expect(a.firstTokenAt).toBeCloseTo(model.stepMs(1, 4), 9);
    expect(a.finishedAt).toBeCloseTo(model.stepMs(1, 4) + 2 * model.stepMs(1, 0) + model.stepMs(2, 4), 9);
    // b came at 25: not in the steps planned at 14 and 24 (they began before it), but in the one at 34.
    expect(b.admittedAt).toBeCloseTo(model.stepMs(1, 4) + 2 * model.stepMs(1, 0), 9);
    expect(b.firstTokenAt).toBeCloseTo(b.admittedAt! + model.stepMs(2, 4), 9);

    // An engine with nothing else to do begins the step when the request arrives.
    const idle = lateModel();
    const c = idle.model.submit({ prompt: ids(0, 4), outputTokens: 2, onToken: noop });
    idle.inner.advance(25); // c's steps: 0-14 and 14-24, so the engine is idle from 24
    const d = idle.model.submit({ prompt: ids(100, 4), outputTokens: 2, onToken: noop });
    idle.inner.runAll();
    expect(c.finishedAt).toBeCloseTo(model.stepMs(1, 4) + model.stepMs(1, 0), 9);
    expect(d.admittedAt).toBe(25);
    expect(d.firstTokenAt).toBeCloseTo(25 + model.stepMs(1, 4), 9);
  });

  it('time to first token grows with the queue ahead', () => {
    const { clock, model, submit } = setup({ maxBatch: 1 });
    const tickets = ['a', 'b', 'c'].map((label, i) => submit(label, ids(i * 100, 8), 2));
    clock.runAll();
    const ttft = tickets.map((t) => t.firstTokenAt! - t.arrivedAt);
    // Each waits for the ones before it: a prefill step (8 tokens) and a decode step each.
    const one = model.stepMs(1, 8) + model.stepMs(1, 0);
    expect(ttft[0]).toBeCloseTo(model.stepMs(1, 8), 9);
    expect(ttft[1]).toBeCloseTo(one + model.stepMs(1, 8), 9);
    expect(ttft[2]).toBeCloseTo(2 * one + model.stepMs(1, 8), 9);
  });

  it('time to first token grows with the prompt tokens the cache missed', () => {
    const { clock, model, submit } = setup();
    const miss = submit('miss', ids(0, 40));
    clock.runAll();
    const hit = submit('hit', ids(0, 40));
    clock.runAll();
    expect(hit.hitTokens).toBe(36);
    expect(miss.firstTokenAt! - miss.arrivedAt).toBeCloseTo(model.stepMs(1, 40), 9);
    expect(hit.firstTokenAt! - hit.arrivedAt).toBeCloseTo(model.stepMs(1, 4), 9);
    // 36 tokens not computed: 36 ms at 1,000 prompt tokens per second.
    expect(miss.firstTokenAt! - miss.arrivedAt - (hit.firstTokenAt! - hit.arrivedAt)).toBeCloseTo(36, 9);
  });

  it('the time between tokens grows with the batch', () => {
    const alone = setup();
    alone.submit('a', ids(0, 4), 3);
    alone.clock.runAll();
    const crowded = setup();
    crowded.submit('a', ids(0, 4), 3);
    for (let i = 1; i < 4; i++) crowded.submit(`o${i}`, ids(i * 100, 4), 3);
    crowded.clock.runAll();
    const gap = (times: number[]) => times[2]! - times[1]!;
    expect(gap(alone.times.get('a')!)).toBeCloseTo(alone.model.stepMs(1, 0), 9);
    expect(gap(crowded.times.get('a')!)).toBeCloseTo(crowded.model.stepMs(4, 0), 9);
    expect(crowded.model.stepMs(4, 0)).toBeGreaterThan(alone.model.stepMs(1, 0));
  });

  it('a prompt longer than the step budget is prefilled in chunks, and its chunks slow the decodes sharing their steps', () => {
    const { clock, model, events, times, submit } = setup({ maxBatchedTokens: 16 });
    submit('d', ids(0, 4), 6);
    clock.advance(15); // d decodes
    submit('long', ids(100, 40));
    clock.runAll();
    // 40 prompt tokens, 15 a step beside d's decode token: chunks of 15, 15, 10.
    expect(events).toEqual(['d:0', 'd:1', 'd:2', 'd:3', 'd:4', 'long:0!', 'd:5!']);
    const d = times.get('d')!;
    expect(d[2]! - d[1]!).toBeCloseTo(model.stepMs(2, 15), 9);
    expect(d[3]! - d[2]!).toBeCloseTo(model.stepMs(2, 15), 9);
    expect(d[4]! - d[3]!).toBeCloseTo(model.stepMs(2, 10), 9);
    expect(d[5]! - d[4]!).toBeCloseTo(model.stepMs(1, 0), 9);
    expect(model.stats.steps).toBe(6);
  });

  it('a request that cannot get its blocks waits, and the requests behind it wait too (head of line)', () => {
    // 8 blocks: big takes 7 (25 prompt tokens + 2 out), next needs 2, tiny needs 1.
    const { clock, events, submit, model } = setup({ cacheBlocks: 8 });
    submit('big', ids(0, 25), 2);
    submit('next', ids(100, 5));
    submit('tiny', ids(200, 2));
    clock.advance(1);
    expect(model.numRunning).toBe(1);
    expect(model.numWaiting).toBe(2);
    clock.runAll();
    expect(events).toEqual(['big:0', 'big:1!', 'next:0!', 'tiny:0!']);
  });

  it('refuses a request that could never fit in the cache, and an empty prompt', () => {
    const { model } = setup({ cacheBlocks: 4 });
    expect(() => model.submit({ prompt: ids(0, 16), outputTokens: 1, onToken: () => {} })).toThrow(
      EngineRejected,
    );
    expect(() => model.submit({ prompt: [], outputTokens: 1, onToken: () => {} })).toThrow(EngineRejected);
    expect(model.stats.requests).toBe(0);
  });

  it('tells each request once that it ended, after its last token or when aborted', () => {
    const { clock, model } = setup();
    const ended: string[] = [];
    const tokens: string[] = [];
    const request = (label: string, outputTokens: number) =>
      model.submit({
        prompt: ids(label.charCodeAt(0) * 100, 4),
        outputTokens,
        onToken: (i) => tokens.push(`${label}:${i}`),
        onEnd: (ticket) => ended.push(`${label}:${ticket.state}:${tokens.length}`),
      });
    request('a', 2);
    const b = request('b', 5);
    clock.advance(20); // the first step (19 ms) gave each its first token
    b.abort();
    b.abort();
    clock.runAll();
    expect(ended).toEqual(['b:aborted:2', 'a:finished:3']);
  });

  it('an aborted request frees its blocks and its batch slot at once, and gets no more tokens', () => {
    const { clock, model, events, submit } = setup({ maxBatch: 1 });
    const a = submit('a', ids(0, 8), 5);
    submit('b', ids(100, 8), 1);
    clock.advance(30); // a has 2 tokens (at 18 and 28 ms)
    expect(model.kvUsage).toBeGreaterThan(0);
    a.abort();
    expect(model.numRunning).toBe(0);
    expect(a.state).toBe('aborted');
    clock.runAll();
    expect(events).toEqual(['a:0', 'a:1', 'b:0!']);
    expect(model.kvUsage).toBe(0);
    expect(model.stats.finishedBy).toEqual({ stop: 0, length: 1, abort: 1 });
    a.abort(); // twice is once
    expect(model.stats.aborted).toBe(1);
  });
});

describe('engine model: LoRA adapters', () => {
  it('with maxLoras 1 a request for a second adapter waits; requests for the running adapter or none pass it', () => {
    const { clock, model, events, submit } = setup({ adapters: ['a', 'b'], maxLoras: 1, loraLoadMs: 5 });
    submit('a1', ids(0, 4), 2, { adapter: 'a' });
    submit('b1', ids(100, 4), 2, { adapter: 'b' });
    submit('a2', ids(200, 4), 2, { adapter: 'a' });
    submit('base', ids(300, 4), 2);
    clock.advance(1);
    expect(model.loraState()).toEqual({ running: ['a'], waiting: ['b'] });
    clock.runAll();
    expect(events).toEqual(['a1:0', 'a2:0', 'base:0', 'a1:1!', 'a2:1!', 'base:1!', 'b1:0', 'b1:1!']);
    expect(model.stats.loraLoads).toBe(2);
  });

  it('refuses an adapter it does not serve', () => {
    const { model } = setup({ adapters: ['a'] });
    expect(() => model.submit({ prompt: [1], outputTokens: 1, adapter: 'z', onToken: () => {} })).toThrow(
      /unknown LoRA/,
    );
  });
});

describe('engine model: determinism', () => {
  function trace(seed: number): string[] {
    const { clock, model } = setup({ jitter: 0.5, seed, maxBatch: 2 });
    const out: string[] = [];
    for (let i = 0; i < 6; i++) {
      model.submit({
        prompt: ids(i * 7, 10 + i),
        outputTokens: 3,
        onToken: (index) => out.push(`${i}:${index}@${clock.now().toFixed(6)}`),
      });
    }
    clock.runAll();
    return out;
  }

  it('the same seed gives the same timeline; another seed other step times, in the same order', () => {
    const first = trace(7);
    expect(trace(7)).toEqual(first);
    const other = trace(8);
    expect(other).not.toEqual(first);
    const order = (t: string[]) => t.map((e) => e.split('@')[0]);
    expect(order(other)).toEqual(order(first));
  });
});

describe('engine model: /metrics', () => {
  it("writes vLLM's names: requests running and waiting, KV-cache use, prefix-cache queries and hits, and the LoRA gauge", () => {
    const { clock, model, submit } = setup({ maxBatch: 1, adapters: ['sql', 'chat'], maxLoras: 2 });
    let wall = 1_700_000_000_000;
    const metrics = new EngineMetrics(model, 'llama', () => wall);
    submit('warm', ids(0, 20));
    clock.runAll();
    submit('hit', ids(0, 20), 4, { adapter: 'sql' });
    submit('queued', ids(0, 20), 1, { adapter: 'chat' });
    clock.advance(1);
    wall += 2000;
    const text = metrics.render();
    const line = (name: string) => text.split('\n').find((l) => l.startsWith(name));
    expect(line('vllm:num_requests_running{')).toBe(
      'vllm:num_requests_running{engine="0",model_name="llama"} 1.0',
    );
    expect(line('vllm:num_requests_waiting{')).toBe(
      'vllm:num_requests_waiting{engine="0",model_name="llama"} 1.0',
    );
    expect(line('vllm:kv_cache_usage_perc{')).toBe(
      `vllm:kv_cache_usage_perc{engine="0",model_name="llama"} ${model.kvUsage}`,
    );
    expect(model.kvUsage).toBeGreaterThan(0);
    // warm: 20 queried, 0 hit; hit (another adapter's chain): 20 queried, 0 hit.
    expect(line('vllm:prefix_cache_queries_total{')).toBe(
      'vllm:prefix_cache_queries_total{engine="0",model_name="llama"} 40.0',
    );
    expect(line('vllm:prefix_cache_hits_total{')).toBe(
      'vllm:prefix_cache_hits_total{engine="0",model_name="llama"} 0.0',
    );
    expect(text).toContain('# TYPE vllm:prefix_cache_hits_total counter');
    expect(text).toContain('vllm:prefix_cache_hits_created{engine="0",model_name="llama"} 1700000000.0');
    expect(text).toContain(
      'vllm:cache_config_info{block_size="4",enable_prefix_caching="True",engine="0",num_gpu_blocks="64"} 1.0',
    );
    expect(line('vllm:lora_requests_info{')).toBe(
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql",waiting_lora_adapters="chat"} 1700000002.0',
    );
    // A later scrape keeps the earlier combination, at the time it was last seen.
    clock.runAll();
    wall += 1000;
    const later = metrics
      .render()
      .split('\n')
      .filter((l) => l.startsWith('vllm:lora_requests_info{'));
    expect(later).toEqual([
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql",waiting_lora_adapters="chat"} 1700000002.0',
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1700000003.0',
    ]);
    expect(metrics.render()).toContain(
      'vllm:request_success_total{engine="0",model_name="llama",finished_reason="length"} 3.0',
    );
  });

  it('has no LoRA gauge without adapters', () => {
    const { model } = setup();
    expect(new EngineMetrics(model, 'm').render()).not.toContain('lora');
  });
});

describe('engine tokens', () => {
  it('a text is its words cut into chunks of 4 characters; whitespace is no token', () => {
    expect(textTokens('prefix caching')).toHaveLength(4); // pref ix cach ing
    expect(textTokens('  prefix \n caching ')).toEqual(textTokens('prefix caching'));
    expect(countTextTokens('prefix caching a')).toBe(5);
    expect(textTokens('abcd')).not.toEqual(textTokens('abce'));
  });

  it("a chat prompt and its answer are the start of the next turn's prompt", () => {
    const turn1 = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Name a colour.' },
    ];
    const answer = ' the quick brown';
    const turn2 = [
      ...turn1,
      { role: 'assistant', content: answer.trim() },
      { role: 'user', content: 'Another.' },
    ];
    const prefix = [...chatTokens(turn1), ...textTokens(answer)];
    expect(chatTokens(turn2).slice(0, prefix.length)).toEqual(prefix);
    expect(chatTokens(turn2).length).toBeGreaterThan(prefix.length);
  });
});
