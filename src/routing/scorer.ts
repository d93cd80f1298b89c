import { AffinityIndex } from './affinity-index.js';
import {
  adapterIn,
  type CandidateView,
  holdReason,
  loadOf,
  loraState,
  pendingPrefillOf,
  readingOf,
  saturation,
} from './candidate-view.js';
import { DecayingMax } from './decaying-max.js';
import { blockHashes } from './prefix-blocks.js';
import { randomIndex } from './random-index.js';
import { decidedBy, PREFILL_SCALE_CHARS, round, scoreViews, uncachedChars } from './scores.js';
import {
  type Candidate,
  type CandidateReading,
  type HeavyTenantOptions,
  type RandomSource,
  type RouteContext,
  type RoutingExplanation,
  type RoutingPolicy,
  type SaturationOptions,
  SCORER_NAMES,
  type ScorerOptions,
  type ScorerWeights,
} from './types.js';

/**
 * The scorer policy, after the Kubernetes Gateway API Inference Extension's and llm-d's
 * schedulers: filters, then weighted scorers, on what the engines report of themselves.
 *
 * Filters (the worker picker has already kept the healthy workers whose circuits admit):
 * - `saturated`: a worker whose reading is stale, whose engine has more than
 *   `saturation.maxWaiting` requests waiting, or whose KV cache is fuller than
 *   `saturation.maxKvCacheUsage`. When every candidate is saturated the request waits in the
 *   gateway (`saturated()`, flow control); if it is sent anyway, all of them are scored.
 * - `lora`: for a LoRA adapter, workers whose every adapter slot is taken by other adapters,
 *   while some worker has it loaded or a slot free.
 *
 * Scorers, each 0..1 (higher is better), weighted and summed:
 * - `prefix`: the square of the share of the prompt's blocks the worker was last sent
 *   (affinity-index.ts, shared by replicas), which its engine's prefix cache most likely holds;
 * - `queue`: fewer requests waiting on its engine (min-max over the candidates);
 * - `kvCache`: more of its KV cache free (1 - use);
 * - `lora`: the adapter asked for is loaded there (running or waiting requests use it);
 * - `inflight`: fewer requests in flight there from this gateway and, shared through Redis, the
 *   other replicas (Candidate.elsewhere; min-max);
 * - `prefill`: less prefill work ahead there, in characters: its pending prefill plus the part of
 *   this prompt its cache likely lacks (so a prefix hit and a backlog weigh in one unit).
 *
 * A heavy tenant (flow control: far more requests in flight than the others'; `ctx.tenantWeight`)
 * does not take the prefill the others need (`heavy`). An engine computes a prompt in the steps
 * every request in its batch waits on, so one long document there delays the first token of
 * every short question that joins it, whatever its priority; a burst of them on every engine at
 * once is what made a small tenant's TTFT p99 four times what it was alone. While a tenant is
 * heavy:
 * - its request goes only to a worker with no prompt pending prefill, and waits in the gateway
 *   (`saturated`, fair between tenants) while none has, or while long prompts (more than
 *   `heavy.longPrefillChars`) are pending on `heavy.prefillShare` of the workers already: the
 *   rest are the others';
 * - the others' go to a worker with no long prompt pending and room in its batch (fewer requests
 *   in flight there than its engine has ever reported running), when one has; prefix affinity
 *   and the scores choose among those;
 * - with `heavy.turnMs`, its prompts go only to the workers whose turn it is (`prefillShare` of
 *   them, the turn moving on by one worker every `turnMs`), and the others'
 *   prefer the rest. Replicas learn of each other's picks some ms late (load sharing), and two
 *   of them sending a long prompt and a short question to the same worker at once was the
 *   commonest cause of a small tenant's slow first token left; the turn, which every replica
 *   computes alike (from the model's whole worker list and `turnClock`), keeps them apart
 *   without a message.
 *
 * The best total wins; equal totals are broken at random (the random source is injected). Each
 * decision is explained (`lastExplanation`): the scorer whose weighted difference between the
 * winner and the runner-up was largest, the filters' counts, the best candidates' scores.
 */
export const SCORER_DEFAULTS: ScorerOptions = {
  weights: { prefix: 3, queue: 2, kvCache: 1, lora: 5, inflight: 3, prefill: 3 },
  // vLLM's default --max-num-seqs on most GPUs (V1; 1024 on H100/H200), SGLang's is larger.
  saturation: { maxWaiting: 5, maxKvCacheUsage: 0.9, defaultBatch: 256 },
  // Half the engines, taken in turn every 100 ms: the routing benchmark's (d) chose them (README,
  // "Routing benchmark": what was tried).
  heavy: { isolate: true, prefillShare: 0.5, longPrefillChars: 2048, turnMs: 100 },
};

/** The explanation of a pick among one candidate. */
const ONLY_CANDIDATE: RoutingExplanation = Object.freeze({
  decidedBy: 'only_candidate',
  filtered: Object.freeze({ saturated: 0, lora: 0 }),
  scores: Object.freeze([]),
});
/** Candidates whose scores an explanation lists. */
const EXPLAINED = 4;
/** Totals closer than this are equal. */
const EPSILON = 1e-9;

/** Workers with a long prompt pending prefill (more than `longPrefillChars`). */
function longPrefills(views: readonly CandidateView[], heavy: HeavyTenantOptions): number {
  let n = 0;
  for (const v of views) if (pendingPrefillOf(v.candidate) > heavy.longPrefillChars) n++;
  return n;
}

/** How many of `count` workers a heavy tenant's long prompts may be pending on at once (at least one). */
function heavyWorkers(count: number, heavy: HeavyTenantOptions): number {
  return Math.max(1, Math.floor(heavy.prefillShare * count));
}

/**
 * The clock a heavy tenant's turn moves by: the wall clock as it was when this process started,
 * moved on by the monotonic clock. Replicas whose clocks agreed when they started (NTP) take the
 * same turn without a message, and a step of the wall clock later (ntpd, a VM resumed) moves no
 * turn.
 */
const WALL_AT_START = Date.now() - performance.now();
export const turnClock = (): number => WALL_AT_START + performance.now();

/**
 * The workers whose turn it is to take a heavy tenant's prompts (`heavy.turnMs`), or undefined
 * for any: `heavyWorkers` of the model's workers (`fleet`: all of them, in id order, whatever the
 * candidates of this pick), from one that moves on every `turnMs`. Every replica computes the
 * same set without telling the others, so no replica sends a small question where another has
 * just sent a long prompt.
 */
function heavyTurn(
  fleet: readonly string[],
  heavy: HeavyTenantOptions,
  now: number,
): Set<string> | undefined {
  if (heavy.turnMs <= 0 || fleet.length < 2) return undefined;
  const k = heavyWorkers(fleet.length, heavy);
  const from = Math.floor(now / heavy.turnMs) % fleet.length;
  const turn = new Set<string>();
  for (let j = 0; j < k; j++) turn.add(fleet[(from + j) % fleet.length]!);
  return turn;
}

/** How long a learnt batch size or most-running count counts after it was last seen: one to two of these. */
const LEARNT_WINDOW_MS = 5 * 60_000;

/** A worker's DecayingMax in `map`, made on first use. */
function learnt(map: Map<string, DecayingMax>, id: string): DecayingMax {
  let max = map.get(id);
  if (!max) {
    max = new DecayingMax(LEARNT_WINDOW_MS);
    map.set(id, max);
  }
  return max;
}

/** The model's workers in id order (RouteContext.fleet), or, without it, the candidates'. */
function fleetOf(ctx: RouteContext, views: readonly CandidateView[]): readonly string[] {
  return ctx.fleet ?? views.map((v) => v.candidate.id).sort();
}

export class ScorerPolicy implements RoutingPolicy {
  readonly name = 'scorer';
  readonly options: ScorerOptions;
  readonly affinity: AffinityIndex;
  lastExplanation: RoutingExplanation | undefined;
  /** Per worker: when its engine was last read, and this gateway's load on it then. */
  private readonly atReading = new Map<string, { scrapedAt: number; load: number }>();
  /**
   * Per worker: the largest batch its engine ran while requests waited there (its batch is full
   * then), over the last one or two LEARNT_WINDOW_MS (DecayingMax: an engine restarted smaller
   * under the same id gives its old room back).
   */
  private readonly batch = new Map<string, DecayingMax>();
  /**
   * Per worker: the most requests its engine reported running lately (DecayingMax). Where a
   * request waited behind a prompt's prefill (the step's token budget spent) the batch above is
   * learnt short of its size; the most running is not, once the fleet has been loaded (the room a
   * heavy tenant's neighbours are given).
   */
  private readonly peakRunning = new Map<string, DecayingMax>();

  constructor(
    options: {
      weights?: Partial<ScorerWeights> | undefined;
      saturation?: Partial<SaturationOptions> | undefined;
      heavy?: Partial<HeavyTenantOptions> | undefined;
    } = {},
    affinity?: AffinityIndex,
    private readonly random: RandomSource = Math.random,
    /** The clock of a heavy tenant's turn (turnClock; tests inject one). */
    private readonly clock: () => number = turnClock,
  ) {
    this.options = {
      weights: { ...SCORER_DEFAULTS.weights, ...options.weights },
      saturation: { ...SCORER_DEFAULTS.saturation, ...options.saturation },
      heavy: { ...SCORER_DEFAULTS.heavy, ...options.heavy },
    };
    this.affinity = affinity ?? new AffinityIndex();
  }

  /**
   * Whether the request should wait in the gateway: every candidate saturated, at least one of
   * them by what its engine reported. A fleet whose every reading is stale (its /metrics hang)
   * is scored as it is: waiting would turn a monitoring fault into an outage, and readings that
   * never come would never end the wait.
   */
  saturated(candidates: readonly Candidate[], ctx: RouteContext): boolean {
    const { views } = this.viewsOf(candidates, ctx.model);
    const heavy = ctx.tenantWeight === 'heavy' && this.options.heavy.isolate;
    // A heavy tenant's request also waits while long prompts are pending on its share of the
    // workers, and while every worker has a prompt pending.
    if (heavy && longPrefills(views, this.options.heavy) >= heavyWorkers(views.length, this.options.heavy))
      return true;
    const turn = heavy ? heavyTurn(fleetOf(ctx, views), this.options.heavy, this.clock()) : undefined;
    let reported = false;
    for (const view of views) {
      const why =
        heavy && !this.fitsBeside(view, true, turn) ? 'prefill' : holdReason(view, this.options.saturation);
      if (why === undefined) return false;
      if (why !== 'stale') reported = true;
    }
    return reported;
  }

  select(candidates: readonly Candidate[], ctx: RouteContext): Candidate {
    // Nothing to choose (a model on one worker, or one left by the filters): no prompt hashed,
    // no scores made, on the path of every request to a one-worker model. Nor is the pick
    // recorded for affinity: a one-worker model needs none; when the filters left one (a retry,
    // the others down), a later turn may not know that worker holds its prefix.
    if (candidates.length === 1) {
      // Its pending prefill counts the whole prompt: no prefix was looked up.
      const chars = ctx.text?.length ?? 0;
      this.lastExplanation = chars === 0 ? ONLY_CANDIDATE : { ...ONLY_CANDIDATE, prefillChars: chars };
      return candidates[0]!;
    }
    const { views: all, adapter } = this.viewsOf(candidates, ctx.model);
    const filtered: Record<string, number> = { saturated: 0, lora: 0 };
    // The pending-prefill bound holds requests in the gateway while every worker is past it
    // (`saturated`), but leaves no worker out of a pick: whether a backlog outweighs what a
    // worker's cache saves is the prefill score's to weigh. (Left out, a long conversation's
    // turn went from the engine holding its context to a cold one, to prefill all of it there.)
    // Where a request adds no more than `maxWaiting` to a full batch's queue (what flow control
    // let it go for: sent to another, a burst overfilled a batch by one); else where the queue is
    // not past it; else, every one saturated (the request could not wait), the least bad of all.
    const saturationOptions = this.options.saturation;
    let views = all.filter((v) => holdReason(v, saturationOptions) === undefined);
    if (views.length === 0) views = all.filter((v) => saturation(v, saturationOptions) === undefined);
    if (views.length === 0) views = all;
    filtered.saturated = all.length - views.length;
    if (ctx.tenantWeight !== undefined && this.options.heavy.isolate) {
      const heavy = ctx.tenantWeight === 'heavy';
      const turn = heavyTurn(fleetOf(ctx, all), this.options.heavy, this.clock());
      let fit = views.filter((v) => this.fitsBeside(v, heavy, turn));
      if (!heavy && turn !== undefined) {
        const apart = fit.filter((v) => !turn.has(v.candidate.id));
        if (apart.length > 0) fit = apart;
      }
      // None does (the request could not wait, or a pick raced another's): all of them are
      // scored. (Falling back to those without a long prompt pending, full or not, was worse:
      // the small tenants then waited for a slot in a full batch.)
      if (fit.length > 0) {
        filtered.heavy_tenant = views.length - fit.length;
        views = fit;
      }
    }
    if (adapter !== undefined && views.some((v) => v.lora === 'loaded' || v.lora === 'free')) {
      const able = views.filter((v) => v.lora !== 'full');
      filtered.lora = views.length - able.length;
      views = able;
    }
    const { hashes, depth } = this.prefix(views, ctx);
    const chosen = this.choose(views, depth, hashes.length, filtered, ctx.text?.length ?? 0);
    this.affinity.record(hashes, chosen.id);
    return chosen;
  }

  removeWorker(workerId: string): void {
    this.atReading.delete(workerId);
    this.batch.delete(workerId);
    this.peakRunning.delete(workerId);
  }

  /**
   * While a tenant is heavy: whether a worker takes a request without costing the others' first
   * tokens. The heavy tenant's: nothing pending prefill there. Another's: no long prompt pending
   * there, and fewer requests there (every replica's) than its engine has ever run at once.
   */
  private fitsBeside(v: CandidateView, heavy: boolean, turn: ReadonlySet<string> | undefined): boolean {
    const pending = pendingPrefillOf(v.candidate);
    if (heavy) return pending === 0 && (turn === undefined || turn.has(v.candidate.id));
    if (pending > this.options.heavy.longPrefillChars) return false;
    const peak = this.peakRunning.get(v.candidate.id)?.get(performance.now());
    return peak === undefined || loadOf(v.candidate) < peak;
  }

  /** The prompt's block hashes, and how deep each view's worker holds them. */
  private prefix(
    views: readonly CandidateView[],
    ctx: RouteContext,
  ): { hashes: number[]; depth: ReadonlyMap<string, number> } {
    const text = ctx.text;
    if (!text) return { hashes: [], depth: new Map() };
    const { blockChars, maxBlocks } = this.affinity.options;
    const hashes = blockHashes(ctx.model ?? '', text, blockChars, maxBlocks);
    const allowed = new Set(views.map((v) => v.candidate.id));
    return { hashes, depth: this.affinity.match(hashes, allowed) };
  }

  private choose(
    views: readonly CandidateView[],
    depth: ReadonlyMap<string, number>,
    blocks: number,
    filtered: Record<string, number>,
    textChars: number,
  ): Candidate {
    const weights = this.options.weights;
    const scores = scoreViews(views, depth, blocks, {
      maxWaiting: this.options.saturation.maxWaiting,
      blockChars: this.affinity.options.blockChars,
      textChars,
      prefillChars: PREFILL_SCALE_CHARS,
    });
    const totals = views.map((_, i) => {
      let total = 0;
      for (const name of SCORER_NAMES) total += weights[name] * scores[name][i]!;
      return total;
    });
    let best = Number.NEGATIVE_INFINITY;
    for (const t of totals) if (t > best) best = t;
    const tied: number[] = [];
    for (let i = 0; i < totals.length; i++) if (totals[i]! >= best - EPSILON) tied.push(i);
    const winner = tied.length === 1 ? tied[0]! : tied[randomIndex(this.random, tied.length)]!;
    const weighted = (i: number): Record<string, number> => {
      const by: Record<string, number> = {};
      for (const name of SCORER_NAMES) by[name] = round(weights[name] * scores[name][i]!);
      return by;
    };
    const order = totals
      .map((_, i) => i)
      .sort((a, b) => (a === winner ? -1 : b === winner ? 1 : totals[b]! - totals[a]!));
    this.lastExplanation = {
      decidedBy: decidedBy(views.length, tied.length, winner, order[1], scores, weights),
      filtered,
      prefillChars: uncachedChars(
        textChars,
        depth.get(views[winner]!.candidate.id),
        this.affinity.options.blockChars,
      ),
      scores: order.slice(0, EXPLAINED).map((i) => ({
        id: views[i]!.candidate.id,
        total: round(totals[i]!),
        by: weighted(i),
      })),
    };
    return views[winner]!.candidate;
  }

  /** The candidates as the scorer sees them now (each engine's reading taken once), and the adapter asked for. */
  private viewsOf(
    candidates: readonly Candidate[],
    model: string | undefined,
  ): { views: CandidateView[]; adapter: string | undefined } {
    const now = performance.now();
    const readings = candidates.map((c) => readingOf(c, now));
    const adapter = adapterIn(candidates, readings, model);
    return { views: candidates.map((c, i) => this.view(c, readings[i]!, adapter)), adapter };
  }

  /** One candidate as the scorer sees it, from its reading. */
  private view(c: Candidate, reading: CandidateReading, adapter: string | undefined): CandidateView {
    const s = reading.signals;
    let waiting = s?.waiting ?? 0;
    let full = false;
    if (reading.state === 'fresh' && s) {
      // The engine was read up to an interval ago. What the gateway replicas sent there since
      // (this one's count, the others' as they last shared it), net of what ended, went to its
      // batch while the batch had room, and to its queue past that. The batch: learnt from
      // readings with requests waiting (the batch is full then), else what the engine reports or
      // the worker is configured with, else a default: a cold burst, sent before any reading
      // showed a full batch, counts against it and waits in the gateway.
      let mark = this.atReading.get(c.id);
      if (mark?.scrapedAt !== s.scrapedAt) {
        // Counted from the replicas' requests there when the engine was asked, or from what it
        // holds if that is fewer: the rest were still on their way to it (or ended unseen).
        mark = {
          scrapedAt: s.scrapedAt,
          load: Math.min(s.loadWhenAsked ?? loadOf(c), s.running + s.waiting),
        };
        this.atReading.set(c.id, mark);
        if (s.waiting > 0) learnt(this.batch, c.id).note(s.running, s.scrapedAt);
        learnt(this.peakRunning, c.id).note(s.running, s.scrapedAt);
      }
      const batch =
        this.batch.get(c.id)?.get(s.scrapedAt) ??
        s.batchSize ??
        c.maxBatch ??
        this.options.saturation.defaultBatch;
      const room = Math.max(0, batch - s.running);
      const sent = loadOf(c) - mark.load;
      waiting = s.waiting > 0 ? Math.max(0, waiting + sent) : Math.max(0, sent - room);
      full = s.waiting > 0 || sent >= room;
    }
    return {
      candidate: c,
      state: reading.state,
      waiting,
      full,
      kvCacheUsage: reading.state === 'stale' ? undefined : s?.kvCacheUsage,
      lora: adapter === undefined ? 'unknown' : loraState(reading, adapter),
    };
  }
}
