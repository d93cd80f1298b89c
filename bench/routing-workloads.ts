/**
 * The routing benchmark's workloads, generated from a seed: the same sessions, texts and arrival
 * times for every policy and replica count measured on them.
 *
 * - `chat`: multi-turn chat sessions; each session uses one of a few shared system prompts, its
 *   turns come one after the other (the next when the answer is in, after a think time), each
 *   sending the whole conversation so far.
 * - `agent`: agent loops: a long shared system prompt (instructions and tools) per agent kind,
 *   a task, then steps each appending the model's answer and a long tool result: contexts grow
 *   to several thousand tokens.
 * - `short`: independent short prompts, nothing shared.
 * - `tenants`: one hot tenant (long unique documents under its own system prompt, three
 *   quarters of the load, sent in bursts twice a second as a batch job would) beside many small
 *   tenants (short questions under a system prompt of their own, a quarter of the load);
 *   `tenants-alone` is the small tenants' very same requests without the hot tenant.
 * - `burst` (not in the default run): twice the fleet's batch slots of short prompts, all sent at
 *   the start of the cell to gateways that have not yet seen the engines full (a cold burst):
 *   how many of them wait in the engines rather than in the gateway.
 *
 * Sessions arrive as a Poisson process whose rate puts the fleet at `load` times its batched
 * capacity (see `engineSecondsPerRequest`), from before the cell starts: a session that arrived
 * earlier starts at the turn it would have reached, so the cell starts in the steady state
 * (but with cold caches).
 */
import { mulberry32 } from '../src/engine/prng.js';
import type { ResolvedEngineOptions } from '../src/mock/engine-options.js';
import { chatTokens, roleToken, textTokens } from '../src/mock/engine-tokens.js';
import { sequence } from '../src/mock/generate.js';

export const WORKLOADS = ['chat', 'agent', 'short', 'tenants', 'tenants-alone'] as const;
/** Workloads run only when `--workloads` names them. */
export const OTHER_WORKLOADS = ['burst'] as const;
export type WorkloadName = (typeof WORKLOADS)[number] | (typeof OTHER_WORKLOADS)[number];

export interface Turn {
  /** The message this turn appends (a user message, or a tool's result written as one). */
  content: string;
  maxTokens: number;
  /** The wait after the previous turn's answer (the user thinking, the tool running). */
  thinkMs: number;
}

export interface Session {
  id: number;
  /** When it sends its first turn, in ms from the start of the cell. */
  startMs: number;
  /**
   * The turn it starts at. A session that arrived before the cell started (so that the cell
   * begins in the steady state: a mix of sessions at every turn, not all at their first) has
   * done the turns before it: they are its history, with the answers the mock gives.
   */
  firstTurn: number;
  tenant: string;
  /** The hot tenant's (workload `tenants`). */
  hot: boolean;
  system: string | undefined;
  turns: Turn[];
}

export interface Workload {
  name: WorkloadName;
  sessions: Session[];
  /** Requests per second offered (all sessions' turns). */
  requestRate: number;
  /** The fleet's batched capacity for this workload, in requests per second. */
  capacity: number;
  /** Mean prompt tokens, output tokens and prompt tokens an ideal router would still compute (per request). */
  mean: { promptTokens: number; outputTokens: number; idealPrefillTokens: number; turns: number };
}

type Random = () => number;

const uniformInt = (random: Random, lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
const exponential = (random: Random, mean: number) => -mean * Math.log(1 - random());

/** Synthetic words (2 to 10 letters), from their own seed: the same vocabulary in every workload. */
const VOCABULARY: readonly string[] = (() => {
  const random = mulberry32(12345);
  const letters = 'etaoinshrdlcumwfgypbvkjxqz';
  return Array.from({ length: 2048 }, () => {
    const length = uniformInt(random, 2, 10);
    let word = '';
    for (let i = 0; i < length; i++) word += letters[Math.floor(random() ** 1.5 * letters.length)];
    return word;
  });
})();

/** Text of about `tokens` tokens (engine-tokens.ts: 4-character chunks of words). */
function text(random: Random, tokens: number): string {
  const words: string[] = [];
  let count = 0;
  while (count < tokens) {
    const word = VOCABULARY[Math.floor(random() * VOCABULARY.length)]!;
    words.push(word);
    count += Math.ceil(word.length / 4);
  }
  return words.join(' ');
}

type Draft = Omit<Session, 'startMs' | 'firstTurn'>;

interface Kind {
  /** Makes one session (without its start), from `random`. */
  session(random: Random, id: number): Draft;
  /** Its share of the load (workloads mixing kinds of session). */
  share: number;
  /** Sessions that arrive in bursts: each waits for the next multiple of this many ms. */
  burstMs?: number;
}

function kindsOf(name: WorkloadName, seed: number): Kind[] {
  const fixed = mulberry32(seed ^ 0x5eed);
  switch (name) {
    case 'chat': {
      const systems = Array.from({ length: 6 }, () => text(fixed, uniformInt(fixed, 500, 900)));
      return [
        {
          share: 1,
          session: (random, id) => ({
            id,
            tenant: `user-${id % 50}`,
            hot: false,
            // Some system prompts are more used than others.
            system: systems[Math.floor(random() ** 1.5 * systems.length)],
            turns: Array.from({ length: uniformInt(random, 3, 7) }, (_, k) => ({
              content: text(random, uniformInt(random, 30, 120)),
              maxTokens: uniformInt(random, 16, 32),
              thinkMs: k === 0 ? 0 : exponential(random, 250),
            })),
          }),
        },
      ];
    }
    case 'agent': {
      const systems = Array.from({ length: 3 }, () => text(fixed, uniformInt(fixed, 1500, 2500)));
      return [
        {
          share: 1,
          session: (random, id) => ({
            id,
            tenant: `agent-${id % 20}`,
            hot: false,
            system: systems[id % systems.length],
            turns: Array.from({ length: uniformInt(random, 6, 12) }, (_, k) => ({
              content:
                k === 0
                  ? `Task: ${text(random, uniformInt(random, 100, 300))}`
                  : `Tool result: ${text(random, uniformInt(random, 150, 700))}`,
              maxTokens: uniformInt(random, 24, 40),
              thinkMs: k === 0 ? 0 : exponential(random, 150),
            })),
          }),
        },
      ];
    }
    case 'short':
    case 'burst':
      return [
        {
          share: 1,
          session: (random, id) => ({
            id,
            tenant: `user-${id % 50}`,
            hot: false,
            system: undefined,
            turns: [
              {
                content: text(random, uniformInt(random, 20, 200)),
                maxTokens: uniformInt(random, 8, 48),
                thinkMs: 0,
              },
            ],
          }),
        },
      ];
    case 'tenants':
    case 'tenants-alone': {
      const small = Array.from({ length: 16 }, () => text(fixed, uniformInt(fixed, 200, 400)));
      const hotSystem = text(fixed, 300);
      const kinds: Kind[] = [
        {
          share: 0.25,
          session: (random, id) => {
            const tenant = Math.floor(random() * small.length);
            return {
              id,
              tenant: `small-${tenant}`,
              hot: false,
              system: small[tenant],
              turns: [
                {
                  content: text(random, uniformInt(random, 20, 80)),
                  maxTokens: uniformInt(random, 16, 32),
                  thinkMs: 0,
                },
              ],
            };
          },
        },
        {
          share: 0.75,
          // A batch job: what it sends comes all at once, twice a second.
          burstMs: 500,
          session: (random, id) => ({
            id,
            tenant: 'hot',
            hot: true,
            system: hotSystem,
            turns: [
              {
                content: `Summarize: ${text(random, uniformInt(random, 600, 1500))}`,
                maxTokens: uniformInt(random, 32, 64),
                thinkMs: 0,
              },
            ],
          }),
        },
      ];
      return kinds;
    }
  }
}

/** The tokens of one turn's prompt, and of what it leaves in the cache (its prompt and answer). */
function turnTokens(system: string | undefined, history: { role: string; content: string }[]): number[] {
  return chatTokens(system === undefined ? history : [{ role: 'system', content: system }, ...history]);
}

function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

interface Cost {
  promptTokens: number;
  outputTokens: number;
  /** What an ideal router would still prefill: the tokens not in the engine's cache, in full blocks, from the previous turn or the shared system prompt. */
  idealPrefillTokens: number;
  turns: number;
}

/** The mean cost of a request of sessions like `sessions` (the mock answers `sequence(max_tokens)`). */
function meanCost(sessions: readonly Draft[], blockSize: number): Cost {
  let prompt = 0;
  let output = 0;
  let prefill = 0;
  let requests = 0;
  const floorBlock = (n: number) => Math.floor(n / blockSize) * blockSize;
  for (const s of sessions) {
    const history: { role: string; content: string }[] = [];
    // Other sessions under the same system prompt left it cached, up to the first user message's marker.
    let cached: number[] =
      s.system === undefined
        ? []
        : [...chatTokens([{ role: 'system', content: s.system }], false), roleToken('user')];
    for (const turn of s.turns) {
      history.push({ role: 'user', content: turn.content });
      const tokens = turnTokens(s.system, history);
      const hit = floorBlock(Math.min(commonPrefix(tokens, cached), tokens.length - 1));
      prompt += tokens.length;
      prefill += tokens.length - hit;
      output += turn.maxTokens;
      requests++;
      const answer = sequence(turn.maxTokens);
      cached = [...tokens, ...textTokens(answer)];
      history.push({ role: 'assistant', content: answer });
    }
  }
  return {
    promptTokens: prompt / requests,
    outputTokens: output / requests,
    idealPrefillTokens: prefill / requests,
    turns: requests / sessions.length,
  };
}

/**
 * Engine-seconds one request costs with every batch full and an ideal prefix cache: its share of
 * the decode steps of a full batch, and the prefill of what no cache could hold.
 */
export function engineSecondsPerRequest(cost: Cost, engine: ResolvedEngineOptions): number {
  return (
    (cost.outputTokens * fullStepMs(engine)) / engine.maxBatch / 1000 +
    cost.idealPrefillTokens / engine.prefillTokensPerSecond
  );
}

/** A decode step of a full batch, in ms. */
function fullStepMs(engine: ResolvedEngineOptions): number {
  return (1000 / engine.decodeTokensPerSecond) * (1 + engine.batchSlowdown * (engine.maxBatch - 1));
}

export interface WorkloadSettings {
  engines: number;
  engine: ResolvedEngineOptions;
  /** Offered load, a fraction of the batched capacity. */
  load: number;
  /** Sessions start over this many seconds. */
  seconds: number;
  seed: number;
}

/**
 * The sessions of a workload over `seconds`: each kind of session arrives as a Poisson process
 * at the rate that gives it its share of `load` times the fleet's batched capacity. A kind's
 * sessions come from a PRNG of their own, so `tenants-alone` has exactly the small tenants'
 * sessions of `tenants`.
 */
export function makeWorkload(name: WorkloadName, settings: WorkloadSettings): Workload {
  const kinds = kindsOf(name, settings.seed);
  const sessions: Session[] = [];
  let requestRate = 0;
  let capacity = 0;
  const sampledCosts: Cost[] = [];
  const rates: number[] = [];
  kinds.forEach((kind, k) => {
    const sampler = mulberry32(settings.seed * 7919 + k + 1);
    const sample = Array.from({ length: 200 }, (_, i) => kind.session(sampler, i));
    const cost = meanCost(sample, settings.engine.blockSize);
    const seconds = engineSecondsPerRequest(cost, settings.engine);
    // The kind's requests per second at its share of the load, and its sessions per second.
    const rate = (kind.share * settings.load * settings.engines) / seconds;
    capacity += (kind.share * settings.engines) / seconds;
    if (name === 'tenants-alone' && k === 1) return; // the hot tenant stays away
    sampledCosts.push(cost);
    rates.push(rate);
    requestRate += rate;
    const random = mulberry32(settings.seed * 104729 + k + 1);
    const arrivals = mulberry32(settings.seed * 15485863 + k + 1);
    // A turn takes about its answer at a full batch's pace, then the think time before the next.
    const answerMs = cost.outputTokens * fullStepMs(settings.engine);
    if (name === 'burst') {
      // All at once, at the start: twice what the fleet's batches hold.
      const count = 2 * settings.engines * settings.engine.maxBatch;
      for (let n = 0; n < count; n++) sessions.push({ ...kind.session(random, n), startMs: 0, firstTurn: 0 });
      return;
    }
    const longest = Math.max(...sample.map((s) => s.turns.reduce((ms, t) => ms + t.thinkMs + answerMs, 0)));
    let t = -longest;
    for (let n = 0; ; n++) {
      t += exponential(arrivals, (1000 * cost.turns) / rate);
      if (t >= settings.seconds * 1000) break;
      const draft = kind.session(random, n);
      // Where a session that arrived `-t` ms before the cell is at when the cell starts.
      let due = t;
      let firstTurn = 0;
      while (firstTurn < draft.turns.length && due + draft.turns[firstTurn]!.thinkMs < 0) {
        due += draft.turns[firstTurn]!.thinkMs + answerMs;
        firstTurn++;
      }
      if (firstTurn === draft.turns.length) continue; // over before the cell starts
      let startMs = Math.max(0, due + draft.turns[firstTurn]!.thinkMs);
      if (kind.burstMs) startMs = Math.ceil(startMs / kind.burstMs) * kind.burstMs;
      if (startMs >= settings.seconds * 1000) continue;
      sessions.push({ ...draft, startMs, firstTurn });
    }
  });
  sessions.sort((a, b) => a.startMs - b.startMs || a.id - b.id);
  sessions.forEach((s, i) => {
    s.id = i;
  });
  // Means over the requests of every kind (each weighed by its request rate).
  const total = rates.reduce((a, b) => a + b, 0);
  const weighted = (f: (c: Cost) => number) =>
    sampledCosts.reduce((sum, c, k) => sum + (rates[k]! / total) * f(c), 0);
  return {
    name,
    sessions,
    requestRate,
    capacity,
    mean: {
      promptTokens: weighted((c) => c.promptTokens),
      outputTokens: weighted((c) => c.outputTokens),
      idealPrefillTokens: weighted((c) => c.idealPrefillTokens),
      turns: weighted((c) => c.turns),
    },
  };
}
