import type { SluiceConfigInput } from '../../src/config/schema.js';
import { REAL_TIMING } from '../../src/dispatch/retry-backoff.js';
import type { MockWorker } from '../../src/mock/mock-worker.js';
import { metricOrZero, perTest, post, sseData } from './gateway.js';

/**
 * The fixture of the fallback tests (test/fallbacks*.test.ts, README "Fallbacks"): a provider that
 * misbehaves on purpose, one fault per case on the primary model (the mock worker's per-model
 * faults), `primary` configured to fall back to `backup`. The mock's answer is a deterministic
 * word sequence that a continuation carries on from the text so far, so a rescued stream is
 * exactly sequence(N), on whichever models it was made.
 */
export const PRIMARY = 'primary';
export const BACKUP = 'backup';
export const TOKENS = 12;

export interface Chunk {
  model: string;
  choices?: { delta?: { content?: string }; finish_reason: string | null }[];
  error?: { code: string };
}

/** Call inside a describe: gateways and workers are closed after each test. */
export function fallbackFixture() {
  const fx = perTest();

  /** One worker per model (so that attempts and circuits are each model's own), fast tokens. */
  async function setup(input: SluiceConfigInput = {}, backupModel: { continuation?: boolean } = {}) {
    const [primaryWorker, backupWorker] = (await Promise.all([
      fx.mocks(1, { tokensPerSecond: 0, models: [PRIMARY] }),
      fx.mocks(1, { tokensPerSecond: 0, models: [BACKUP] }),
    ]).then(([a, b]) => [a[0], b[0]])) as [MockWorker, MockWorker];
    /** Every wait the gateway made between attempts (real waits, recorded). */
    const waits: number[] = [];
    const gateway = await fx.gateway(
      {
        workers: [
          { url: primaryWorker.url, id: 'wp' },
          { url: backupWorker.url, id: 'wb' },
        ],
        ...input,
        models: {
          [PRIMARY]: { fallbacks: [BACKUP] },
          [BACKUP]: backupModel,
          ...input.models,
        },
      },
      {
        retryTiming: {
          random: Math.random,
          sleep: (ms, signal) => {
            waits.push(ms);
            return REAL_TIMING.sleep(ms, signal);
          },
        },
      },
    );
    const attempts = (worker: MockWorker) => worker.stats.requests;
    return { primaryWorker, backupWorker, gateway, attempts, waits };
  }

  const chat = (url: string, extra: Record<string, unknown> = {}, model = PRIMARY) =>
    post(`${url}/v1/chat/completions`, {
      model,
      max_tokens: TOKENS,
      messages: [{ role: 'user', content: 'hi' }],
      ...extra,
    });
  const streamed = (text: string) => {
    const chunks = sseData(text)
      .filter((d) => d !== '[DONE]')
      .map((d) => JSON.parse(d) as Chunk);
    return {
      chunks,
      text: chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join(''),
      done: sseData(text).at(-1) === '[DONE]',
      error: chunks.find((c) => c.error)?.error,
    };
  };
  const fallbacks = (url: string, reason: string) =>
    metricOrZero(url, 'sluice_fallbacks_total', { from: PRIMARY, to: BACKUP, reason });

  return { fx, setup, chat, streamed, fallbacks };
}
