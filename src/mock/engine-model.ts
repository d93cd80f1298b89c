import { mulberry32 } from '../engine/prng.js';
import { type EngineOptions, type ResolvedEngineOptions, resolveEngineOptions } from './engine-options.js';
import { blockHash, blockHashes, chainSeed } from './engine-tokens.js';
import { BlockPool } from './prefix-cache.js';

/**
 * A model of one inference engine (vLLM's V1 scheduler, simplified), enough to rank routing
 * policies: requests wait in a queue, run in a continuous batch, hit or miss a paged prefix cache,
 * and get their tokens when the engine's steps compute them.
 *
 * Each step, back to back while there is work:
 * 1. The running sequences are scheduled in the order they were admitted, within a token budget
 *    (`maxBatchedTokens`): one token for each decoding sequence, then chunks of the prompts
 *    still being prefilled (chunked prefill).
 * 2. While the budget lasts and the batch has room (`maxBatch`), waiting requests are admitted
 *    first come, first served (`schedulingPolicy: 'priority'`: lowest `priority` first, then
 *    first come; as in vLLM, a priority orders the waiting queue and never takes a running
 *    request's place): a request's cached prefix is looked up (a hit is every leading
 *    full block whose hash chain is cached, never the whole prompt: its last token is always
 *    computed), and blocks are taken for the rest of its prompt and for all its output (a
 *    simplification: vLLM takes output blocks as it goes and preempts when they run out; here
 *    a request is admitted only when all of them can be had, so there is no preemption). A
 *    request that cannot get its blocks waits, and so do those behind it (head of line); one
 *    whose LoRA adapter would be one too many in the batch (`maxLoras`) is skipped for now.
 * 3. The step lasts `1000 / decodeTokensPerSecond × (1 + batchSlowdown × (b − 1))` ms for a
 *    batch of b sequences, plus `p × 1000 / prefillTokensPerSecond` ms for its p prefill tokens,
 *    plus `loraLoadMs` for each adapter loaded into a slot, scaled by the seeded jitter if any.
 * 4. When it ends, each decoding sequence has one more token, and each whose prefill completed
 *    has its first; the full blocks computed are registered in the prefix cache. A finished
 *    request registers the full blocks of its answer too (the next turn of a conversation hits
 *    them), then frees its blocks.
 *
 * So the time to first token is the wait in the queue plus the steps of the prefill of the
 * tokens the cache missed, and the time between tokens grows with the batch and with the
 * prefills sharing its steps. Time is the clock's: a real one (the mock's Clock) or a virtual
 * one (VirtualClock) under which every decision and every time is the same on every run.
 * Steps follow one another on their computed times, not on when a timer happened to fire, so a
 * busy event loop delays tokens but does not change the engine's timeline.
 */

export interface EngineClock {
  now(): number;
  /** Runs `task` at `due` (a `now()` value); tasks due at the same time run in the order given. */
  at(due: number, task: () => void): void;
}

export interface EngineRequest {
  /** The prompt's token ids (see engine-tokens.ts); at least one. */
  prompt: readonly number[];
  /** Tokens to generate, at least 1: the first comes with the prefill's last step, then one per step. */
  outputTokens: number;
  /** The answer's token ids, registered in the prefix cache after the prompt's when the request ends. */
  outputIds?: readonly number[] | undefined;
  /** Its place in the waiting queue under `schedulingPolicy: 'priority'`: lower goes first (vLLM's). Default 0. */
  priority?: number | undefined;
  /** A LoRA adapter the engine serves; its blocks are cached apart from the base model's. */
  adapter?: string | undefined;
  /** Why it ends after `outputTokens` (vLLM's `finished_reason`); default 'length'. */
  finishReason?: 'stop' | 'length' | undefined;
  /** Each token as it is computed: index 0 is the first; `last` on the final one. */
  onToken(index: number, last: boolean): void;
  /** Once, when the request has finished or been aborted (after its last token's callback). */
  onEnd?: ((ticket: EngineTicket) => void) | undefined;
}

/** A request in the engine, as it goes. Times are the clock's. */
export interface EngineTicket {
  /** Arrival order, from 0. */
  readonly id: number;
  readonly state: 'waiting' | 'running' | 'finished' | 'aborted';
  readonly promptTokens: number;
  /** Its place in the waiting queue under priority scheduling (lower first; 0 unless given). */
  readonly priority: number;
  /** Prompt tokens found in the prefix cache when admitted. */
  readonly hitTokens: number;
  readonly arrivedAt: number;
  readonly admittedAt: number | undefined;
  readonly firstTokenAt: number | undefined;
  readonly finishedAt: number | undefined;
  /** Ends the request (the client left): its blocks are freed, its batch slot too. */
  abort(): void;
}

/** A request the engine refuses (an empty prompt, or one that cannot fit in the whole cache). */
export class EngineRejected extends Error {
  override readonly name = 'EngineRejected';
}

export interface EngineStats {
  /** Requests submitted (rejected ones not counted). */
  requests: number;
  finished: number;
  aborted: number;
  /** Prompt tokens of the admitted requests, and the part of them the prefix cache held (vLLM's prefix-cache queries and hits). */
  prefixQueries: number;
  prefixHits: number;
  /** Prompt tokens computed (the misses). */
  prefillTokens: number;
  /** Output tokens computed. */
  generationTokens: number;
  steps: number;
  /** Cached blocks evicted to make room. */
  evictions: number;
  /** Adapters loaded into a slot. */
  loraLoads: number;
  /** Requests that ended each way (vLLM's `request_success_total` reasons, and aborts). */
  finishedBy: { stop: number; length: number; abort: number };
  /**
   * How late steps ended on the clock after the time the model gave them, in ms: always 0 under
   * a VirtualClock; on a real clock, what a busy event loop delayed the tokens by (the engine's
   * timeline itself does not slip); `over5ms` counts the steps more than 5 ms late.
   */
  lateness: { totalMs: number; maxMs: number; over5ms: number };
}

class Sequence implements EngineTicket {
  state: EngineTicket['state'] = 'waiting';
  hitTokens = 0;
  admittedAt: number | undefined;
  firstTokenAt: number | undefined;
  finishedAt: number | undefined;
  /** Prompt tokens computed or hit. */
  computed = 0;
  generated = 0;
  /** Leading blocks of the prompt registered (hit or computed). */
  registered = 0;
  blocks: number[] = [];
  readonly promptTokens: number;
  readonly totalBlocks: number;
  readonly priority: number;

  constructor(
    readonly id: number,
    readonly request: EngineRequest,
    readonly hashes: readonly number[],
    readonly seed: number,
    readonly arrivedAt: number,
    blockSize: number,
    private readonly engine: EngineModel,
  ) {
    this.promptTokens = request.prompt.length;
    this.priority = request.priority ?? 0;
    const output = Math.max(request.outputTokens, request.outputIds?.length ?? 0);
    this.totalBlocks = Math.ceil((this.promptTokens + output) / blockSize);
  }

  abort(): void {
    this.engine.abort(this);
  }
}

interface Work {
  seq: Sequence;
  /** Prompt tokens computed in this step; 0 for a decode. */
  prefill: number;
}

export class EngineModel {
  readonly options: ResolvedEngineOptions;
  readonly stats: EngineStats = {
    requests: 0,
    finished: 0,
    aborted: 0,
    prefixQueries: 0,
    prefixHits: 0,
    prefillTokens: 0,
    generationTokens: 0,
    steps: 0,
    evictions: 0,
    loraLoads: 0,
    finishedBy: { stop: 0, length: 0, abort: 0 },
    lateness: { totalMs: 0, maxMs: 0, over5ms: 0 },
  };
  private readonly pool: BlockPool;
  private readonly random: () => number;
  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  /** Adapters in the GPU slots, least recently used first. */
  private readonly slots: string[] = [];
  private nextId = 0;
  private busy = false;
  private step: Work[] = [];
  private stepEnd = 0;
  private readonly adapters: ReadonlySet<string>;

  constructor(
    options: EngineOptions,
    private readonly clock: EngineClock,
  ) {
    this.options = resolveEngineOptions(options);
    this.pool = new BlockPool(this.options.cacheBlocks);
    this.random = mulberry32(this.options.seed);
    this.adapters = new Set(this.options.adapters);
  }

  /** Requests in the batch. */
  get numRunning(): number {
    return this.running.length;
  }

  get numWaiting(): number {
    return this.waiting.length;
  }

  /** The share of KV-cache blocks in use, 0 to 1 (vLLM's `kv_cache_usage_perc`). */
  get kvUsage(): number {
    return this.pool.usage();
  }

  get cachedBlocks(): number {
    return this.pool.cachedBlocks;
  }

  /** Adapters of the running requests, and of the waiting ones, each sorted. */
  loraState(): { running: string[]; waiting: string[] } {
    const names = (seqs: readonly Sequence[]) =>
      [...new Set(seqs.flatMap((s) => (s.request.adapter ? [s.request.adapter] : [])))].sort();
    return { running: names(this.running), waiting: names(this.waiting) };
  }

  /** Whether `name` is an adapter this engine serves. */
  servesAdapter(name: string): boolean {
    return this.adapters.has(name);
  }

  /** The duration of a step of `seqs` sequences computing `prefillTokens` prompt tokens and loading `loads` adapters, in ms (before jitter). */
  stepMs(seqs: number, prefillTokens: number, loads = 0): number {
    const o = this.options;
    return (
      (1000 / o.decodeTokensPerSecond) * (1 + o.batchSlowdown * Math.max(0, seqs - 1)) +
      (prefillTokens * 1000) / o.prefillTokensPerSecond +
      loads * o.loraLoadMs
    );
  }

  /** Queues a request; throws EngineRejected when it can never run. */
  submit(request: EngineRequest): EngineTicket {
    const { blockSize, cacheBlocks, prefixCaching } = this.options;
    if (request.prompt.length === 0) throw new EngineRejected('the prompt is empty');
    if (!Number.isInteger(request.outputTokens) || request.outputTokens < 1) {
      throw new EngineRejected(`outputTokens must be an integer >= 1, got ${request.outputTokens}`);
    }
    const priority = request.priority ?? 0;
    if (!Number.isSafeInteger(priority))
      throw new EngineRejected(`priority must be an integer, got ${priority}`);
    if (priority !== 0 && this.options.schedulingPolicy !== 'priority') {
      // vLLM's words.
      throw new EngineRejected(`Got priority ${priority} but Priority scheduling is not enabled.`);
    }
    if (request.adapter !== undefined && !this.adapters.has(request.adapter)) {
      throw new EngineRejected(`unknown LoRA adapter ${request.adapter}`);
    }
    const seed = chainSeed(request.adapter);
    const hashes = prefixCaching ? blockHashes(request.prompt, blockSize, seed) : [];
    const seq = new Sequence(this.nextId, request, hashes, seed, this.clock.now(), blockSize, this);
    if (seq.totalBlocks > cacheBlocks) {
      throw new EngineRejected(
        `the request needs ${seq.totalBlocks} KV-cache blocks (${seq.promptTokens} prompt tokens and ${request.outputTokens} to generate, ${blockSize} per block); the cache has ${cacheBlocks}`,
      );
    }
    this.nextId++;
    this.stats.requests++;
    this.enqueue(seq);
    this.wake();
    return seq;
  }

  /** Puts a request in the waiting queue: at its end, or under `priority` behind every request of a lower or equal priority. */
  private enqueue(seq: Sequence): void {
    const waiting = this.waiting;
    let at = waiting.length;
    if (this.options.schedulingPolicy === 'priority')
      while (at > 0 && waiting[at - 1]!.priority > seq.priority) at--;
    waiting.splice(at, 0, seq);
  }

  /** Forgets the prefix cache (vLLM's `/reset_prefix_cache`); refused (false) while requests hold blocks. */
  resetPrefixCache(): boolean {
    return this.pool.reset();
  }

  /** @internal Through the ticket. */
  abort(seq: Sequence): void {
    if (seq.state === 'finished' || seq.state === 'aborted') return;
    if (seq.state === 'waiting') this.waiting.splice(this.waiting.indexOf(seq), 1);
    else {
      this.running.splice(this.running.indexOf(seq), 1);
      this.pool.release(seq.blocks);
      seq.blocks = [];
    }
    seq.state = 'aborted';
    seq.finishedAt = this.clock.now();
    this.stats.aborted++;
    this.stats.finishedBy.abort++;
    if (seq.request.onEnd) call(() => seq.request.onEnd?.(seq));
  }

  private wake(): void {
    if (this.busy) return;
    this.busy = true;
    const now = this.clock.now();
    this.clock.at(now, () => this.begin(now));
  }

  /**
   * Plans the step starting at `at` and schedules its end; the engine idles when there is nothing
   * to do. Under a late timer (a busy event loop) a request can arrive after `at`, the previous
   * step's end on the engine's timeline, and before that step's end ran: it is not in this step,
   * as it was not there when the step began, unless the engine had nothing else to do, when the
   * step begins as it arrives.
   */
  private begin(at: number): void {
    let start = at;
    if (this.running.length === 0 && this.waiting.length > 0) {
      let first = Number.POSITIVE_INFINITY;
      for (const seq of this.waiting) first = Math.min(first, seq.arrivedAt);
      start = Math.max(at, first);
    }
    const { work, ms } = this.plan(start);
    this.stats.evictions = this.pool.evictions;
    if (work.length === 0) {
      this.busy = false;
      return;
    }
    this.step = work;
    this.stepEnd = start + ms;
    this.stats.steps++;
    this.clock.at(this.stepEnd, this.end);
  }

  private plan(at: number): { work: Work[]; ms: number } {
    const o = this.options;
    const work: Work[] = [];
    let budget = o.maxBatchedTokens;
    let prefill = 0;
    for (const seq of this.running) {
      if (budget === 0) break;
      const left = seq.promptTokens - seq.computed;
      const tokens = left > 0 ? Math.min(left, budget) : 0;
      work.push({ seq, prefill: tokens });
      budget -= Math.max(1, tokens);
      prefill += tokens;
    }
    let loads = 0;
    const active = new Set<string>();
    for (const seq of this.running) if (seq.request.adapter) active.add(seq.request.adapter);
    for (let i = 0; i < this.waiting.length && budget > 0 && this.running.length < o.maxBatch; ) {
      const seq = this.waiting[i]!;
      if (seq.arrivedAt > at) {
        i++; // it came after the step began (see begin)
        continue;
      }
      const adapter = seq.request.adapter;
      if (adapter !== undefined && !active.has(adapter) && active.size >= o.maxLoras) {
        i++; // vLLM skips it for now and looks at the next one
        continue;
      }
      if (!this.admit(seq, at)) break; // no blocks: it and everything behind it wait
      this.waiting.splice(i, 1);
      if (adapter !== undefined) {
        active.add(adapter);
        if (this.useSlot(adapter, active)) loads++;
      }
      const tokens = Math.min(seq.promptTokens - seq.computed, budget);
      work.push({ seq, prefill: tokens });
      budget -= tokens;
      prefill += tokens;
    }
    if (work.length === 0) return { work, ms: 0 };
    let ms = this.stepMs(work.length, prefill, loads);
    if (o.jitter > 0) ms *= 1 + o.jitter * (2 * this.random() - 1);
    this.stats.loraLoads += loads;
    return { work, ms };
  }

  /** Takes a waiting request's blocks if it can have them all, and puts it in the batch. */
  private admit(seq: Sequence, at: number): boolean {
    const { blockSize } = this.options;
    // The last prompt token is always computed (it gives the first output token).
    const hit = this.pool.match(seq.hashes, Math.floor((seq.promptTokens - 1) / blockSize));
    const fresh = seq.totalBlocks - hit.length;
    if (!this.pool.canTake(hit, fresh)) return false;
    seq.blocks = this.pool.take(hit, fresh);
    seq.hitTokens = hit.length * blockSize;
    seq.computed = seq.hitTokens;
    seq.registered = hit.length;
    seq.state = 'running';
    seq.admittedAt = at;
    this.stats.prefixQueries += seq.promptTokens;
    this.stats.prefixHits += seq.hitTokens;
    this.running.push(seq);
    return true;
  }

  /** Puts `adapter` in a GPU slot (the least recently used one not in the batch); true when it had to be loaded. */
  private useSlot(adapter: string, active: ReadonlySet<string>): boolean {
    const at = this.slots.indexOf(adapter);
    if (at >= 0) {
      this.slots.splice(at, 1);
      this.slots.push(adapter);
      return false;
    }
    if (this.slots.length >= this.options.maxLoras) {
      const victim = this.slots.findIndex((name) => !active.has(name));
      this.slots.splice(Math.max(victim, 0), 1);
    }
    this.slots.push(adapter);
    return true;
  }

  private readonly end = (): void => {
    const work = this.step;
    this.step = [];
    const now = this.stepEnd;
    const late = Math.max(0, this.clock.now() - now);
    this.stats.lateness.totalMs += late;
    if (late > this.stats.lateness.maxMs) this.stats.lateness.maxMs = late;
    if (late > 5) this.stats.lateness.over5ms++;
    const { blockSize } = this.options;
    for (const { seq, prefill } of work) {
      if (seq.state !== 'running') continue; // aborted during the step
      if (prefill > 0) {
        seq.computed += prefill;
        this.stats.prefillTokens += prefill;
        const full = Math.min(Math.floor(seq.computed / blockSize), seq.hashes.length);
        for (; seq.registered < full; seq.registered++) {
          this.pool.register(seq.blocks[seq.registered]!, seq.hashes[seq.registered]!);
        }
        if (seq.computed < seq.promptTokens) continue;
      }
      seq.generated++;
      this.stats.generationTokens++;
      if (seq.generated === 1) seq.firstTokenAt = now;
      const last = seq.generated >= seq.request.outputTokens;
      if (last) this.finish(seq, now);
      const { request } = seq;
      call(() => request.onToken(seq.generated - 1, last));
      if (last && request.onEnd) call(() => request.onEnd?.(seq));
    }
    this.begin(now);
  };

  /** Registers the answer's full blocks, frees the request's blocks and takes it out of the batch. */
  private finish(seq: Sequence, now: number): void {
    const { blockSize, prefixCaching } = this.options;
    const output = seq.request.outputIds;
    if (prefixCaching && output && output.length > 0) {
      const ids = seq.request.prompt.concat(output);
      const full = Math.min(Math.floor(ids.length / blockSize), seq.blocks.length);
      let parent = seq.registered > 0 ? seq.hashes[seq.registered - 1]! : seq.seed;
      // Blocks past the prompt's registered ones (the prompt's last partial block completes here).
      for (let k = seq.registered; k < full; k++) {
        parent = blockHash(parent, ids, k * blockSize, (k + 1) * blockSize);
        this.pool.register(seq.blocks[k]!, parent);
      }
    }
    this.pool.release(seq.blocks);
    seq.blocks = [];
    seq.state = 'finished';
    seq.finishedAt = now;
    this.running.splice(this.running.indexOf(seq), 1);
    this.stats.finished++;
    this.stats.finishedBy[seq.request.finishReason ?? 'length']++;
  }
}

/** A request's callback; one that throws does not stop the engine (its error is rethrown outside). */
function call(callback: () => void): void {
  try {
    callback();
  } catch (err) {
    queueMicrotask(() => {
      throw err;
    });
  }
}
